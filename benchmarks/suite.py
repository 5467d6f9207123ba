"""Benchmark suite: updraft vs eager, Inductor, Inductor+freezing, ONNX Runtime and OpenVINO.

    python benchmarks/suite.py                                  # default preset (see --help)
    python benchmarks/suite.py --preset full                    # every backend on every thread count
    python benchmarks/suite.py --models mlp bert --backends eager updraft --threads 1

Every (model, backend, thread count) runs in its own subprocess, so a crash, a hang (timeout)
or a peer that does not install stays in its row ("failed: <reason>"), and the peak RSS of the
row is exactly that process's (os.wait4's ru_maxrss: import + model + compile + runs).
Latency is the median of timed calls after a first (compiling) call and a warm-up; "noise" is
the interquartile range over the median. Cold compile = the first call (Dynamo trace +
backend compile; ONNX Runtime: torch.onnx.export + session creation). Warm compile is
measured only where a backend has an on-disk cache (Inductor: a second process reusing the
first one's cache directory) and only with --warm.

Prints markdown tables, writes them (with the machine and the exact command) into
docs/BENCHMARKS.md between the `suite:begin`/`suite:end` markers, writes the raw rows as JSON
next to it, and draws a PNG bar chart of speedups over eager (matplotlib). Nothing here
asserts on timings.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# label -> (zoo model, batch). Sequence lengths are the zoo defaults (BERT 128, GPT-2 64,
# GPT-2 decode: one token with a 64-token KV cache).
MODELS = {
    "mlp": ("mlp", 1),
    "resnet50": ("resnet50", 1),
    "resnet50_b8": ("resnet50", 8),
    "mobilenet_v2": ("mobilenet_v2", 1),
    "mobilenet_v3": ("mobilenet_v3", 1),
    "bert": ("bert", 1),
    "gpt2": ("gpt2", 1),
    "gpt2_decode": ("gpt2_decode", 1),
    "vit": ("vit", 1),
}
BACKENDS = ["eager", "inductor", "inductor_freeze", "onnxruntime", "openvino", "updraft"]
# --train: label -> (zoo model, zoo kwargs). A step is forward, a cross-entropy loss of the main
# output against fixed random targets over its last dim (class logits for the MLP; hidden
# states stand in for a head elsewhere), backward and an AdamW step, with dropout off so that
# the first step's loss can be checked against eager's (docs/training.md).
TRAIN_MODELS = {
    "mlp": ("mlp", dict(batch=64)),
    "bert": ("bert", dict(batch=4, seq=128)),
    "gpt2": ("gpt2", dict(batch=2, seq=128)),
    "resnet50_b8": ("resnet50", dict(batch=8)),
    "vit": ("vit", dict(batch=4)),
}
# --train backends: the optimizer runs eagerly in every row. updraft is the default
# (training="auto": per graph, the faster of the engine and PyTorch); updraft_engine forces
# the engine for every graph.
TRAIN_BACKENDS = ["eager", "inductor", "updraft", "updraft_engine"]
ALL_BACKENDS = BACKENDS + [b for b in TRAIN_BACKENDS if b not in BACKENDS]
CACHED = {"inductor", "inductor_freeze"}  # backends with an on-disk compile cache
# Inductor's compiles dominate a run (30-60 s per row on a loaded 2-core machine, against
# 5-15 s for the others), so the default preset leaves both Inductor rows out and runs only
# eager + updraft on 1 thread, which keeps a 2-core run near 15 minutes; "inductor" adds them
# on all cores, "full" runs everything everywhere (about an hour on 2 cores).
PRESETS = {
    "default": {"all": ["eager", "onnxruntime", "openvino", "updraft"], "1": ["eager", "updraft"]},
    "inductor": {"all": BACKENDS, "1": ["eager", "updraft"]},
    "full": {"all": BACKENDS, "1": BACKENDS},
}


# ---------------------------------------------------------------------------------------------
# Worker: one (model, backend, threads) in this process. Writes a JSON result to --result.

def _time_calls(fn, min_time: float, min_iters: int, max_iters: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    ts: list[float] = []
    t_end = time.perf_counter() + min_time
    while len(ts) < max_iters and (len(ts) < min_iters or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def _make_runner(backend: str, model, inputs: tuple, threads: int, tmp: Path):
    """Returns a no-argument callable running `model` on `inputs` with `backend`, and a
    function that converts its output to a torch tensor. Raises when the peer is unusable."""
    import torch
    from updraft.zoo import first_tensor as _first_tensor

    if backend == "eager":
        return (lambda: model(*inputs)), _first_tensor
    if backend in ("inductor", "inductor_freeze"):
        import torch._inductor.config as icfg

        icfg.freezing = backend == "inductor_freeze"
        fast = torch.compile(model)
        return (lambda: fast(*inputs)), _first_tensor
    if backend == "updraft":
        fast = torch.compile(model, backend="updraft", options={"num_threads": threads})
        return (lambda: fast(*inputs)), _first_tensor
    if backend == "openvino":
        import openvino.torch  # noqa: F401  (registers the "openvino" torch.compile backend)

        fast = torch.compile(model, backend="openvino",
                             options={"config": {"INFERENCE_NUM_THREADS": threads}})
        return (lambda: fast(*inputs)), _first_tensor
    if backend == "onnxruntime":
        import onnxruntime as ort

        path = str(tmp / "model.onnx")
        try:
            torch.onnx.export(model, inputs, path, dynamo=True)
        except Exception as e:  # the TorchScript exporter still covers some models
            first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            try:
                torch.onnx.export(model, inputs, path, dynamo=False)
            except Exception as e2:
                raise RuntimeError(f"torch.onnx.export failed (dynamo: {first}; torchscript: "
                                   f"{type(e2).__name__}: {str(e2).splitlines()[0] if str(e2) else ''})")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        if len(names) != len(inputs):
            raise RuntimeError(f"exported graph takes {len(names)} inputs, the model {len(inputs)}")
        feeds = {n: t.numpy() for n, t in zip(names, inputs)}
        return (lambda: sess.run(None, feeds)), (lambda out: torch.from_numpy(out[0]))
    raise ValueError(f"unknown backend {backend}")


def boost_priority() -> str:
    """Raises this process's CPU priority over other processes on a shared machine (root only).

    Linux's autogroup scheduling shares the CPU between sessions first and applies nice values
    only inside a session, so a plain `nice -n -20` does not win against another session's
    build; the session's autogroup nice (/proc/self/autogroup) does. Returns what was done.
    Memory bandwidth and caches are still shared: read figures with the load beside them.
    """
    done = []
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-20")
        done.append("autogroup nice -20")
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        done.append("nice -20")
    except OSError:
        pass
    return ", ".join(done) or "not boosted (needs root)"


def _train_worker(spec: dict) -> dict:
    """One --train row: time per training step (forward, loss, backward, AdamW)."""
    import copy

    import torch
    import torch.nn.functional as F
    from updraft import CompilerConfig, get_backend, zoo

    name, kwargs = TRAIN_MODELS[spec["model"]]
    model, inputs = zoo.build(name, **kwargs)
    model.train()
    for m in model.modules():  # dropout off: the first loss is compared with eager's
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if isinstance(getattr(m, "dropout_prob", None), float):
            m.dropout_prob = 0.0
    ref = copy.deepcopy(model)
    with torch.no_grad():
        classes = zoo.first_tensor(model(*inputs)).shape[-1]
        target = torch.randint(0, classes, zoo.first_tensor(model(*inputs)).shape[:-1])

    def loss_of(out):
        out = zoo.first_tensor(out)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))

    backend, threads = spec["backend"], spec["threads"]
    if backend == "eager":
        fast = model
    elif backend == "inductor":
        fast = torch.compile(model)
    elif backend in ("updraft", "updraft_engine"):
        cfg = CompilerConfig(num_threads=threads, training="engine" if backend == "updraft_engine" else "auto")
        fast = torch.compile(model, backend=get_backend(cfg))
    else:
        raise ValueError(f"{backend} has no training mode (inference only)")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(fast(*inputs))
        loss.backward()
        opt.step()
        return loss

    res: dict = {}
    t0 = time.perf_counter()
    first = step()
    res["compile_s"] = time.perf_counter() - t0
    want = loss_of(ref(*inputs))
    res["max_err"] = abs(first.item() - want.item())
    ts = _time_calls(step, spec["min_time"], spec["min_iters"], spec["max_iters"], spec["warmup"])
    q = statistics.quantiles(ts, n=4) if len(ts) >= 4 else [min(ts), 0, max(ts)]
    res.update(median_ms=statistics.median(ts), iqr_ms=q[2] - q[0], iters=len(ts))
    if backend.startswith("updraft"):
        import updraft

        rep = updraft.last_report()
        if rep is not None:
            kinds = rep.compute_by_kind()
            res["engine_ops"] = ", ".join(f"{k.replace('training ', '')} {e}/{e + f}" for k, (e, f) in kinds.items())
            choices = [t.rsplit("; ", 1)[-1].replace("runs in ", "") for g in rep.graphs
                       for k, t in g.compiles if k == "training choice"]
            if choices:
                res["engine_ops"] += " (auto: " + ", ".join(choices) + ")"
    return res


def worker(spec: dict) -> dict:
    if spec.get("train"):
        if spec.get("boost"):
            boost_priority()
        import torch

        torch.set_num_threads(spec["threads"])
        return _train_worker(spec)
    threads = spec["threads"]
    if spec.get("boost"):
        boost_priority()  # before torch starts its threads: they inherit the nice value
    import torch

    torch.set_num_threads(threads)
    from updraft import zoo

    name, batch = MODELS[spec["model"]]
    model, inputs = zoo.build(name, batch=batch)
    res: dict = {}
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        want = zoo.first_tensor(model(*inputs)).clone()
        t0 = time.perf_counter()
        run, to_tensor = _make_runner(spec["backend"], model, inputs, threads, Path(tmp))
        got = to_tensor(run())
        res["compile_s"] = time.perf_counter() - t0
        res["max_err"] = (got.float() - want.float()).abs().max().item()
        ts = _time_calls(run, spec["min_time"], spec["min_iters"], spec["max_iters"], spec["warmup"])
    q = statistics.quantiles(ts, n=4) if len(ts) >= 4 else [min(ts), 0, max(ts)]
    res.update(median_ms=statistics.median(ts), iqr_ms=q[2] - q[0], iters=len(ts))
    if spec["backend"] == "updraft":
        import updraft

        rep = updraft.last_report()
        if rep is not None:
            res["engine_ops"] = f"{rep.num_engine_compute}/{rep.num_engine_compute + rep.num_fallback_compute}"
    return res


# ---------------------------------------------------------------------------------------------
# Driver

def _run_child(spec: dict, timeout: float, env: dict, log: Path, *, script: Path | None = None,
               python: str | None = None, done_key: str = "median_ms") -> dict:
    """Runs one worker process (`python script --worker SPEC --result FILE`; default: this
    script under this interpreter); returns its result plus peak_rss_mb, or status=failed when
    the result lacks `done_key`. benchmarks/llm.py runs its own workers, some in a peer venv."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        result_path = f.name
    cmd = [python or sys.executable, str(script or Path(__file__).resolve()), "--worker", json.dumps(spec),
           "--result", result_path]
    t0 = time.perf_counter()
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        status, ru, timed_out = 0, None, False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, ru = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    row: dict = {"peak_rss_mb": ru.ru_maxrss / 1024 if ru else float("nan"),
                 "wall_s": time.perf_counter() - t0}
    try:
        with open(result_path) as f:
            text = f.read()
        os.unlink(result_path)
        row.update(json.loads(text) if text else {})
    except (OSError, json.JSONDecodeError):
        pass
    if "error" in row:  # terminal colour codes (torch.export's messages) do not belong in a table
        row["error"] = re.sub(r"\x1b\[[0-9;]*m", "", row["error"])
    if timed_out:
        row["status"] = f"failed: timed out after {timeout:.0f} s"
    elif done_key not in row:
        row["status"] = "failed: " + (row.get("error") or _last_error(log, proc.returncode))
    else:
        row["status"] = "ok"
    return row


def _last_error(log: Path, rc: int) -> str:
    try:
        lines = [l.strip() for l in log.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        lines = []
    for l in reversed(lines):
        if "Error" in l or "error" in l or "Exception" in l:
            return l[:200]
    return f"exit code {rc}" + (f": {lines[-1][:200]}" if lines else "")


def _machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(l for l in open("/proc/meminfo") if l.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    vers = [f"torch {torch.__version__}"]
    for mod in ("updraft", "onnxruntime", "openvino", "transformers"):
        try:
            m = __import__(mod)
            vers.append(f"{mod} {getattr(m, '__version__', '?')}")
        except Exception:
            vers.append(f"{mod} not installed")
    return (f"{cpu}, {os.cpu_count()} logical cores{mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; " + ", ".join(vers))


def _fmt(x, spec=".2f", none="—"):
    return none if x is None or x != x else format(x, spec)


def tables(rows: list[dict]) -> str:
    out = []
    for threads in dict.fromkeys(r["threads_label"] for r in rows):
        rs = [r for r in rows if r["threads_label"] == threads]
        n = rs[0]["threads"]
        backends = [b for b in ALL_BACKENDS if any(r["backend"] == b for r in rs)]
        models = list(dict.fromkeys(r["model"] for r in rs))
        eager = {r["model"]: r.get("median_ms") for r in rs if r["backend"] == "eager" and r["status"] == "ok"}
        head = f"{threads} ({n} threads)" if threads == "all cores" else threads
        what = "median ms per training step" if rs[0].get("train") else "median latency ms"
        out.append(f"### {head}: {what} (speedup over eager)\n")
        out.append("| model | " + " | ".join(backends) + " |")
        out.append("|---|" + "---|" * len(backends))
        for m in models:
            cells = []
            for b in backends:
                r = next((r for r in rs if r["model"] == m and r["backend"] == b), None)
                if r is None:
                    cells.append("not run")
                elif r["status"] != "ok":
                    cells.append("failed")
                else:
                    e = eager.get(m)
                    sp = f" ({e / r['median_ms']:.2f}x)" if e and b != "eager" else ""
                    cells.append(f"{r['median_ms']:.2f}{sp}")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
        out.append(f"### {threads}: every row\n")
        out.append("| model | backend | median ms | noise (IQR/median) | speedup | cold compile s | "
                   "warm compile s | peak RSS MB | max abs err | notes |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for m in models:
            for b in backends:
                r = next((r for r in rs if r["model"] == m and r["backend"] == b), None)
                if r is None:
                    continue
                if r["status"] != "ok":
                    reason = r["status"].replace("|", "\\|")
                    out.append(f"| {m} | {b} | — | — | — | — | — | {_fmt(r.get('peak_rss_mb'), '.0f')} | — | {reason} |")
                    continue
                e = eager.get(m)
                sp = f"{e / r['median_ms']:.2f}x" if e else "—"
                noise = f"{100 * r['iqr_ms'] / r['median_ms']:.0f}% ({r['iters']} iters)"
                cold = _fmt(r.get("compile_s")) if b != "eager" else "—"
                warm = _fmt(r.get("warm_compile_s")) if b in CACHED else "no cache"
                if b == "eager":
                    warm = "—"
                notes = f"engine ops {r['engine_ops']}" if r.get("engine_ops") else ""
                out.append(f"| {m} | {b} | {r['median_ms']:.3f} | {noise} | {sp} | {cold} | {warm} | "
                           f"{r['peak_rss_mb']:.0f} | {r['max_err']:.1e} | {notes} |")
        out.append("")
    return "\n".join(out)


def chart(rows: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"chart not drawn: matplotlib unavailable ({type(e).__name__}: {e}); pip install matplotlib"
    groups = list(dict.fromkeys(r["threads_label"] for r in rows))
    fig, axes = plt.subplots(len(groups), 1, figsize=(12, 4.2 * len(groups)), squeeze=False)
    for ax, g in zip(axes[:, 0], groups):
        rs = [r for r in rows if r["threads_label"] == g]
        models = list(dict.fromkeys(r["model"] for r in rs))
        backends = [b for b in ALL_BACKENDS if b != "eager" and any(r["backend"] == b for r in rs)]
        eager = {r["model"]: r["median_ms"] for r in rs if r["backend"] == "eager" and r["status"] == "ok"}
        width = 0.8 / max(len(backends), 1)
        for k, b in enumerate(backends):
            xs, ys = [], []
            for i, m in enumerate(models):
                r = next((r for r in rs if r["model"] == m and r["backend"] == b), None)
                x = i + (k - (len(backends) - 1) / 2) * width
                if r and r["status"] == "ok" and m in eager:
                    xs.append(x)
                    ys.append(eager[m] / r["median_ms"])
                elif r:
                    ax.text(x, 1.0, "x", ha="center", va="bottom", fontsize=8, color="red")
            ax.bar(xs, ys, width, label=b)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models)
        ax.set_yscale("log")  # speedups span 0.3x to 300x on a loaded machine
        ax.set_ylabel("speedup over eager (log)")
        ax.set_title(f"{g} (red x: failed)")
        ax.legend(fontsize=8, ncol=len(backends))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return f"chart: {path}"


BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"
TRAIN_BEGIN, TRAIN_END = "<!-- train-suite:begin -->", "<!-- train-suite:end -->"


def write_doc(doc: Path, body: str, begin: str = BEGIN, end: str = END,
              heading: str = "Latest suite run") -> None:
    """Replaces the block between the `begin`/`end` markers of `doc` with `body`, or appends
    it under a new `## heading` (benchmarks/llm.py writes its own block this way)."""
    block = f"{begin}\n{body}\n{end}"
    text = doc.read_text() if doc.exists() else ""
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        text = pre + block + rest.split(end, 1)[1]
    else:
        text = (text or "# Benchmarks\n\n") + f"\n## {heading}\n\n" + block + "\n"
    doc.write_text(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=sorted(set(MODELS) | set(TRAIN_MODELS)),
                   help="default: every model of the mode (inference: %s; --train: %s)"
                        % (" ".join(MODELS), " ".join(TRAIN_MODELS)))
    p.add_argument("--train", action="store_true",
                   help="time training steps (forward, backward, AdamW) instead of inference; backends "
                        + "/".join(TRAIN_BACKENDS) + "; writes between the train-suite markers")
    p.add_argument("--backends", nargs="+", choices=ALL_BACKENDS,
                   help="backends to run on every thread count (default: the preset's)")
    p.add_argument("--threads", nargs="+", default=["all", "1"],
                   help="thread counts: 'all' (every core) and/or integers (default: all 1)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default",
                   help="default: eager/onnxruntime/openvino/updraft on all cores, eager/updraft on 1 "
                        "thread; inductor: adds both Inductor rows on all cores; full: everything")
    p.add_argument("--min-time", type=float, default=1.5, help="seconds of timed calls per row (default 1.5)")
    p.add_argument("--min-iters", type=int, default=10)
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--warm", action="store_true", help="also time a warm compile where a cache exists (Inductor)")
    p.add_argument("--boost", action="store_true",
                   help="raise the workers' CPU priority (autogroup and nice -20; root only) so that "
                        "other sessions' load on a shared machine stays out of the timings")
    p.add_argument("--timeout", type=float, default=900, help="seconds per row before it is reported failed")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "BENCHMARKS.md",
                   help="markdown file to update ('-' for none)")
    p.add_argument("--chart", type=Path, help="PNG chart (default docs/benchmarks.png; --train: docs/train_benchmarks.png)")
    p.add_argument("--json", type=Path, help="raw rows (default docs/benchmarks.json; --train: docs/train_benchmarks.json)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    table = TRAIN_MODELS if args.train else MODELS
    stem = "train_benchmarks" if args.train else "benchmarks"
    args.chart = args.chart or ROOT / "docs" / f"{stem}.png"
    args.json = args.json or ROOT / "docs" / f"{stem}.json"
    if args.models is None:
        args.models = list(table)
    wrong = [m for m in args.models if m not in table]
    if wrong:
        p.error(f"{'--train has' if args.train else 'inference has'} no model {wrong}; choose from {list(table)}")
    allowed = TRAIN_BACKENDS if args.train else BACKENDS
    if args.backends and any(b not in allowed for b in args.backends):
        p.error(f"backends {[b for b in args.backends if b not in allowed]} do not run in this mode; "
                f"choose from {allowed}")

    if args.worker:
        spec = json.loads(args.worker)
        try:
            res = worker(spec)
        except BaseException as e:
            msg = str(e).strip().splitlines()
            res = {"error": f"{type(e).__name__}: {msg[0][:300] if msg else ''}"}
            import traceback

            traceback.print_exc()
        with open(args.result, "w") as f:
            json.dump(res, f)
        return 0

    ncpu = os.cpu_count() or 1
    cmdline = "python benchmarks/suite.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    logs = Path(tempfile.mkdtemp(prefix="updraft-suite-"))
    rows: list[dict] = []
    print(f"# updraft benchmark suite\n\nmachine: {_machine()}\n\nlogs: {logs}\n", flush=True)
    priority = boost_priority() if args.boost else "normal"
    print(f"priority: {priority}\n", flush=True)
    for tl in args.threads:
        n = ncpu if tl == "all" else int(tl)
        label = "all cores" if tl == "all" else f"{n} thread" + ("s" if n != 1 else "")
        preset = TRAIN_BACKENDS if args.train else PRESETS[args.preset]["all" if tl == "all" else "1"]
        backends = args.backends or preset
        for m in args.models:
            for b in allowed:
                if b not in backends:
                    continue
                spec = dict(model=m, backend=b, threads=n, min_time=args.min_time, min_iters=args.min_iters,
                            max_iters=args.max_iters, warmup=args.warmup, boost=args.boost, train=args.train)
                env = dict(os.environ, OMP_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="false")
                cache = None
                if b in CACHED:  # a fresh cache directory makes the first compile cold
                    cache = tempfile.mkdtemp(prefix="inductor-cache-", dir=logs)
                    env["TORCHINDUCTOR_CACHE_DIR"] = cache
                row = _run_child(spec, args.timeout, env, logs / f"{m}-{b}-{n}.log")
                if cache and args.warm and row["status"] == "ok":
                    warm = _run_child(spec, args.timeout, env, logs / f"{m}-{b}-{n}-warm.log")
                    if warm["status"] == "ok":
                        row["warm_compile_s"] = warm["compile_s"]
                row.update(model=m, backend=b, threads=n, threads_label=label, train=args.train)
                rows.append(row)
                brief = (f"{row['median_ms']:.3f} ms, compile {row['compile_s']:.1f} s"
                         if row["status"] == "ok" else row["status"])
                print(f"[suite] {label:>10} {m:<13} {b:<16} {brief}  (rss {row['peak_rss_mb']:.0f} MB, "
                      f"{row['wall_s']:.0f} s)", file=sys.stderr, flush=True)

    body = tables(rows)
    print(body)
    notes = [chart(rows, args.chart)]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
        notes.append(f"raw rows: {args.json}")
    print("\n".join(notes))
    if str(args.doc) != "-":
        rel = lambda q: os.path.relpath(q, args.doc.parent)  # noqa: E731
        doc_body = (f"Machine: {_machine()}\n\nPriority: {priority}\n\nCommand: `{cmdline.strip()}` "
                    f"({time.strftime('%Y-%m-%d %H:%M')}; median of timed calls, at least "
                    f"{args.min_time:g} s / {args.min_iters} calls per row)\n\n{body}\n"
                    f"![speedup over eager]({rel(args.chart)})\n")
        if args.train:
            write_doc(args.doc, doc_body, TRAIN_BEGIN, TRAIN_END, heading="Latest training suite run")
        else:
            write_doc(args.doc, doc_body)
        print(f"updated {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
