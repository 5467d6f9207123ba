"""benchmarks/suite.py's pieces that decide what a verdict says, without a peer or a timed run:
the aggregation over runs, win/tie/loss, the geomean verdict, the achieved-rate column, the
round-robin order, the work count of a model, and the clean-up between rows (a row's leftover
processes are gone before the next starts). Timings are not asserted."""
import importlib.util
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("suite_benchmark", ROOT / "benchmarks" / "suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(backend, run, ms, status="ok", model="m", **kw):
    r = {"model": model, "backend": backend, "threads": 2, "threads_label": "all cores", "train": False, "run": run,
         "status": status, "peak_rss_mb": 100.0 + run, "load1": 0.5 * run, "busy": 0.1}
    if status == "ok":
        r.update(median_ms=ms, iqr_ms=0.1 * ms, iters=10, compile_s=1.0, max_err=1e-6)
    return {**r, **kw}


def agg_of(suite, backend, times, failed=0):
    rows = [row(backend, i, t) for i, t in enumerate(times)]
    rows += [row(backend, len(times) + i, None, status="failed: boom") for i in range(failed)]
    (a,) = suite.aggregate(rows)
    return a


def test_aggregate_takes_the_median_of_run_medians_and_keeps_good_runs(suite):
    a = agg_of(suite, "updraft", [3.0, 1.0, 2.0], failed=1)
    assert (a["median_ms"], a["min_ms"], a["max_ms"]) == (2.0, 1.0, 3.0)
    assert a["runs"] == 4 and a["failed"] == 1 and a["status"] == "ok"
    assert a["peak_rss_mb"] == 103.0 and a["load1"] == [0.0, 0.5, 1.0, 1.5]
    (bad,) = suite.aggregate([row("openvino", 0, None, status="failed: no")])
    assert bad["status"] == "failed: no" and "median_ms" not in bad


@pytest.mark.parametrize("mine, theirs, word", [
    ([1.0, 1.1, 1.2], [1.3, 1.4, 1.5], "win"),
    ([1.0, 1.1, 1.4], [1.3, 1.4, 1.5], "tie"),  # ranges overlap: not a result
    ([2.0, 2.1, 2.2], [1.3, 1.4, 1.5], "loss"),
    ([1.0], [2.0], "1 run"),  # one run has no range
])
def test_verdict_needs_ranges_that_do_not_overlap(suite, mine, theirs, word):
    got, ratio = suite.verdict(agg_of(suite, "updraft", mine), agg_of(suite, "peer", theirs))
    assert got == word
    assert ratio == pytest.approx(sorted(theirs)[len(theirs) // 2] / sorted(mine)[len(mine) // 2])


def test_geomean_verdict(suite):
    win = (agg_of(suite, "updraft", [1.0, 1.0, 1.1]), agg_of(suite, "peer", [2.0, 2.0, 2.1]))
    tie = (agg_of(suite, "updraft", [1.0, 1.2, 1.5]), agg_of(suite, "peer", [1.0, 1.1, 1.2]))
    assert suite.geomean_verdict([win]).startswith("win 2.00x")
    assert suite.geomean_verdict([tie]).startswith("tie")  # its range spans 1
    loss = (agg_of(suite, "updraft", [2.0, 2.0, 2.1]), agg_of(suite, "peer", [1.0, 1.0, 1.05]))
    assert suite.geomean_verdict([win, loss]).startswith("tie")  # a win and a loss of the same size
    assert suite.geomean_verdict([]) == "—"


def test_tables_mark_verdicts_and_failures(suite):
    rows = [row(b, i, t, model=m) for m in ("a", "b") for b, ts in
            (("eager", [4.0, 4.1, 4.2]), ("onnxruntime", [2.0, 2.1, 2.2]), ("updraft", [1.0, 1.1, 1.2])) for i, t in enumerate(ts)]
    rows.append(row("openvino", 0, None, status="failed: sources must not be empty", model="a"))
    text = suite.tables(suite.aggregate(rows), {"2": {"gemm_gflops": 100.0, "read_gbs": 20.0, "copy_gbs": 15.0}})
    head = next(l for l in text.splitlines() if l.startswith("| model | eager"))
    assert "updraft vs onnxruntime" in head and "updraft vs openvino" in head
    line_a = next(l for l in text.splitlines() if l.startswith("| a |"))  # the summary table's
    assert "win 1.91x" in line_a and "failed" in line_a
    assert "| geomean |" in text and "sources must not be empty" in text


def test_the_model_file_row_is_judged_against_the_peers_too(suite):
    # updraft_load (updraft.export + updraft.load) is a second subject: it gets its own verdict
    # columns against each peer, and neither subject is a peer of the other.
    rows = [row(b, i, t) for b, ts in (("eager", [4.0, 4.1, 4.2]), ("onnxruntime", [2.0, 2.1, 2.2]),
                                       ("updraft", [3.0, 3.1, 3.2]), ("updraft_load", [1.0, 1.1, 1.2]))
            for i, t in enumerate(ts)]
    text = suite.tables(suite.aggregate(rows))
    cells_of = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    head = cells_of(next(l for l in text.splitlines() if l.startswith("| model | eager")))
    assert "updraft vs onnxruntime" in head and "updraft_load vs onnxruntime" in head
    assert "updraft vs updraft_load" not in head and "updraft_load vs updraft" not in head
    cells = cells_of(next(l for l in text.splitlines() if l.startswith("| m |")))
    assert cells[head.index("updraft vs onnxruntime")] == "loss 0.68x"
    assert cells[head.index("updraft_load vs onnxruntime")] == "win 1.91x"


def test_updraft_load_row_runs_the_exported_file(suite, tmp_path):
    # The row's runner: export to a file, load it, call it; the output matches eager.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(3, 16)
    run, to_tensor = suite._make_runner("updraft_load", model, (x,), 1, tmp_path)
    assert (tmp_path / "model.updraft").stat().st_size > 0
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(to_tensor(run()), want, rtol=1e-5, atol=1e-6)  # f32, one GEMM chain


def test_achieved_picks_the_bound_by_the_machine_balance(suite):
    peak = {"gemm_gflops": 100.0, "read_gbs": 20.0, "llc_bytes": 2**20}  # balance 5 flop/byte
    dense = {"status": "ok", "median_ms": 10.0, "flops": 5e8, "bytes": 1e7}
    assert suite.achieved(dense, peak) == "50 GFLOP/s (50% of GEMM)"
    stream = {"status": "ok", "median_ms": 10.0, "flops": 1e7, "bytes": 1e8}
    assert suite.achieved(stream, peak) == "10.0 GB/s (50% of read)"
    small = {"status": "ok", "median_ms": 0.01, "flops": 1e3, "bytes": 1e5}
    assert suite.achieved(small, peak).endswith("(fits in cache)")
    assert suite.achieved(dense, None) == "—"


def test_work_of_counts_matmul_flops_and_each_tensor_once(suite):
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    w = suite.work_of(lin, (x,))
    assert w["flops"] == 2 * 8 * 64 * 32
    assert w["bytes"] == 4 * (64 * 32 + 32 + 8 * 64 + 8 * 32)


def test_work_of_counts_cpu_attention(suite):
    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q = torch.randn(1, 2, 16, 8)
    assert suite.work_of(Attn(), (q, q, q))["flops"] == 2 * (2 * 2 * 16 * 16 * 8)


def test_a_training_step_counts_forward_and_backward_work(suite):
    # The MLP (8 x Linear(512), batch 64): 8 forward GEMMs, 8 weight gradients and 7 input
    # gradients (the first layer's input needs none); AdamW moves 7 x the parameters' bytes.
    w = suite._train_work({"model": "mlp"})
    assert w["flops"] == 23 * 2 * 64 * 512 * 512
    assert w["bytes"] == 7 * 4 * 8 * (512 * 512 + 512)


def test_a_training_row_checks_its_loss_without_a_reference_model(suite):
    # The first step's loss is checked against eager's from a forward without autograd, taken
    # before the row's first step: no copy of the model or its saved activations stays in the
    # timed process (they counted in every row's peak RSS until session 44).
    model, inputs, loss_of, want = suite._train_model({"model": "mlp"})
    assert not torch.is_tensor(want)
    assert loss_of(model(*inputs)).item() == pytest.approx(want, rel=1e-6)
    assert math.isnan(suite._train_model({"model": "mlp", "dropout": True})[3])


def test_a_training_step_counts_cpu_attention_backward(suite):
    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    step = lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()  # noqa: E731
    forward = 2 * (2 * 2 * 16 * 16 * 8)
    assert suite.step_flops(step) == forward + 5 * forward // 2  # backward: 5 matmuls of the forward's 2


def test_training_tables_give_the_gemm_peak_floor(suite):
    work = {"train": True, "flops": 2e9, "bytes": 3e8}  # 20 ms at 100 GFLOP/s + 20 ms at 15 GB/s
    rows = [row(b, i, t, **work) for b, ts in (("eager", [80.0, 81.0, 82.0]), ("updraft_engine", [50.0, 51.0, 52.0]))
            for i, t in enumerate(ts)]
    text = suite.tables(suite.aggregate(rows), {"2": {"gemm_gflops": 100.0, "read_gbs": 20.0, "copy_gbs": 15.0}})
    assert "GEMM-peak floor ms (eager over it)" in text and "updraft_engine vs eager" in text
    line = next(l for l in text.splitlines() if l.startswith("| m |"))
    assert line.rstrip(" |").endswith("win 1.59x | 40 (2.02x)")
    assert "| geomean |" in text and "(2.02x)" in next(l for l in text.splitlines() if l.startswith("| geomean |"))
    # Without the steps' work (--no-peaks, or raw rows of an older run) there is no floor column.
    bare = [{k: v for k, v in r.items() if k not in ("flops", "bytes")} for r in rows]
    assert "GEMM-peak floor" not in suite.tables(suite.aggregate(bare), {"2": {"gemm_gflops": 100.0, "read_gbs": 20.0, "copy_gbs": 15.0}})


def test_rotated_round_robin(suite):
    b = ["eager", "onnxruntime", "updraft"]
    assert [suite.rotated(b, r)[0] for r in range(4)] == ["eager", "onnxruntime", "updraft", "eager"]
    assert sorted(suite.rotated(b, 2)) == sorted(b)


def test_end_session_kills_what_a_row_left_behind(suite):
    # a worker that starts a straggler (as Inductor's compile workers outlive their parent) and exits
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('ok')"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            stdout=subprocess.DEVNULL)
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while not suite._session_pids(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert suite._session_pids(proc.pid), "the straggler should still run before the clean-up"
    suite._end_session(proc.pid)
    assert suite._session_pids(proc.pid) == []


def test_settle_reports_what_a_row_starts_under(suite):
    got = suite.settle(max_wait=0.0, busy_limit=0.0)
    assert set(got) == {"busy", "load1", "settle_s"} and 0.0 <= got["busy"] <= 1.0


def test_old_raw_rows_redraw(suite, tmp_path):
    # docs/benchmarks.json from before --runs is a plain list of rows without run/load fields
    import json
    old = [{k: v for k, v in row(b, 0, t).items() if k not in ("run", "load1", "busy")}
           for b, t in (("eager", 2.0), ("updraft", 1.0))]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert suite.main(["--from-json", str(path), "--doc", "-", "--chart", str(tmp_path / "c.png")]) == 0


def test_optimizer_step_benchmark_runs_the_step_in_the_engine(capsys):
    # benchmarks/optimizer_step.py (the AdamW figures in docs/BENCHMARKS.md): its updraft arm
    # compiles opt.step and the engine runs it.
    import updraft

    spec = importlib.util.spec_from_file_location("optimizer_step", ROOT / "benchmarks" / "optimizer_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--step", "updraft", "--model", "mlp", "--warmup", "0", "--steps", "1"]) == 0
    assert "median" in capsys.readouterr().out
    rep = updraft.last_report()
    assert rep is not None and rep.num_engine_compute > 0 and rep.num_fallback_compute == 0, rep
