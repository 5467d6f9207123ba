"""updraft-run, the C++ command-line runner (tools/updraft-run; docs/updraft-run.md), driven as a
user drives it: model files made here from real models' optimised engine graphs (_C.save_model),
.npy inputs written with numpy, the binary run as a subprocess.

The binary is not built here: it is found in the build tree (build/py, which scripts/test.sh
builds, or build/dev), the newest one when both have it; UPDRAFT_RUN names another. Without one
the tests skip and say so.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from updraft import _C, engine_partition

ROOT = Path(__file__).resolve().parents[2]


def _find_binary() -> str | None:
    if os.environ.get("UPDRAFT_RUN"):
        return os.environ["UPDRAFT_RUN"]
    found = [p for b in ("build/py", "build/dev") for p in [ROOT / b / "tools/updraft-run/updraft-run"] if p.is_file()]
    if found:
        return str(max(found, key=lambda p: p.stat().st_mtime))
    return shutil.which("updraft-run")


BIN = _find_binary()
MISSING = ("updraft-run is not built: scripts/setup.sh builds it in build/py (UPDRAFT_BUILD_RUNTIME, on by "
           "default); for build/dev run cmake --build build/dev, or set UPDRAFT_RUN to the binary")


@pytest.fixture(autouse=True)
def require_binary():
    """A missing binary is a broken set-up, not a reason to pass: every test here fails saying so."""
    if BIN is None:
        pytest.fail(MISSING)


def run_cli(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def engine_executable(model: torch.nn.Module, args: tuple):
    """The optimised engine graph (an _C.Executable) of `model` when it compiles to one engine
    partition, as torch.compile(backend="updraft") builds it, and the partition's runtime inputs."""
    parts = []
    old = engine_partition.lowered_hook
    engine_partition.lowered_hook = lambda part, graph, call_args: parts.append(part)
    try:
        with torch.no_grad():
            torch.compile(model, backend="updraft")(*args)
    finally:
        engine_partition.lowered_hook = old
    assert len(parts) == 1, f"{type(model).__name__} compiled to {len(parts)} engine partitions, the test wants one"
    return parts[0]._state.cg


def save_model_file(path: Path, model, args, output_names, ranges=None, note="test") -> Path:
    cg = engine_executable(model, args)
    if ranges:  # the symbols are torch's (s0, s33, ...): read them off the signature first
        path.write_bytes(_C.save_model(cg, output_names, [], note))
        _, sig, _ = _C.load_model(str(path))
        syms = [d for i in sig.to_dict()["inputs"] for d in i["shape"] if isinstance(d, str)]
        assert len(set(syms)) == len(ranges), syms
        ranges = [(s, lo, hi) for s, (lo, hi) in zip(dict.fromkeys(syms), ranges)]
    path.write_bytes(_C.save_model(cg, output_names, ranges or [], note))
    return path


class Small(torch.nn.Module):
    """Embedding + linear + GELU + LayerNorm, two inputs (i64 ids, f32), two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 32)
        self.lin = torch.nn.Linear(32, 32)
        self.ln = torch.nn.LayerNorm(32)

    def forward(self, ids, x):
        h = self.ln(torch.nn.functional.gelu(self.lin(self.emb(ids) + x)))
        return h, torch.softmax(h, -1)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    torch.manual_seed(0)
    ids, x = torch.randint(0, 50, (2, 8)), torch.randn(2, 8, 32)
    path = save_model_file(d / "small.updraft", Small().eval(), (ids, x), ["hidden", "probs"])
    rng = np.random.default_rng(1)
    inputs = [rng.integers(0, 50, (2, 8)).astype(np.int64), rng.standard_normal((2, 8, 32)).astype(np.float32)]
    files = []
    for k, a in enumerate(inputs):
        files.append(d / f"in{k}.npy")
        np.save(files[-1], a)
    _, sig, _ = _C.load_model(str(path))
    names = [i["name"] for i in sig.to_dict()["inputs"]]
    return {"path": path, "dir": d, "inputs": inputs, "files": files, "names": names}


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory):
    """An MLP whose batch dim is symbolic, range [1, 64]."""
    d = tmp_path_factory.mktemp("dynamic")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 16)
    torch._dynamo.mark_dynamic(x, 0)
    path = save_model_file(d / "mlp_dyn.updraft", model, (x,), ["y"], ranges=[(1, 64)])
    return {"path": path, "dir": d}


def python_outputs(path, inputs, threads):
    """The outputs of the same file loaded and run in Python (_C.load_model), `threads` threads."""
    exe, _, _ = _C.load_model(str(path), {"num_threads": threads})
    shapes = exe.prepare([list(a.shape) for a in inputs])
    dtypes = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "bool": np.bool_}
    outs = [np.empty(s, dtype=dtypes[t]) for s, t in zip(shapes, exe.output_dtypes())]
    exe.run(inputs, outs)
    return outs


def assert_error(p: subprocess.CompletedProcess, *words):
    """Exit code 2 and one line on stderr: "updraft-run: [component] ...; fix", naming `words`."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("updraft-run: [") and ";" in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------

def test_info_shows_signature_sizes_engine_and_arena(small):
    p = run_cli("info", small["path"])
    assert p.returncode == 0, p.stderr
    out = p.stdout
    n_in, n_x = small["names"]
    assert f"{n_in}" in out and "i64[2, 8]" in out and "f32[2, 8, 32]" in out
    assert "hidden" in out and "probs" in out
    assert f"({os.path.getsize(small['path'])} bytes)" in out
    assert "engine     0.2.0" in out and "requires" in out
    # The graph's ops, counted (ModelStats::ops): the embedding, linear, layer_norm and softmax are there.
    ops = next(ln for ln in out.splitlines() if ln.startswith("ops"))
    for op in ("embedding 1", "linear 1", "layer_norm 1", "softmax 1"):
        assert op in ops, ops
    arena = [ln for ln in out.splitlines() if ln.strip().startswith("static")]
    assert len(arena) == 1 and "bytes)" in arena[0], out


def test_info_dynamic_model_gives_ranges_and_arena_per_shape(dynamic):
    p = run_cli("info", dynamic["path"])
    assert p.returncode == 0, p.stderr
    assert " in [1, 64]" in p.stdout
    small_arena = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("smallest")]
    large_arena = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("largest")]
    assert small_arena and large_arena, p.stdout
    size = lambda ln: int(ln.rsplit("(", 1)[1].split()[0])
    assert size(large_arena[0]) >= size(small_arena[0])
    _, sig, _ = _C.load_model(str(dynamic["path"]))
    name = sig.to_dict()["inputs"][0]["name"]
    p = run_cli("info", dynamic["path"], "--shape", f"{name}=7,16")
    assert p.returncode == 0, p.stderr
    assert f"{name}=7,16" in p.stdout
    # Outside the range: the arena line says why, info still succeeds.
    p = run_cli("info", dynamic["path"], "--shape", f"{name}=65,16")
    assert p.returncode == 0 and "not plannable" in p.stdout, p.stdout


@pytest.mark.parametrize("threads", [1, 2])
def test_run_outputs_bit_identical_to_python_load_model(small, tmp_path, threads):
    p = run_cli("run", small["path"], "--input", small["files"][0], "--input", small["files"][1],
                "--output-dir", tmp_path / "out", "--threads", threads)
    assert p.returncode == 0, p.stderr
    want = python_outputs(small["path"], small["inputs"], threads)
    for name, w in zip(["hidden", "probs"], want):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape
        assert got.tobytes() == w.tobytes(), f"{name}: CLI and Python differ"


def test_run_inputs_by_name_and_dynamic_shapes(small, dynamic, tmp_path):
    a, b = small["names"]
    p = run_cli("run", small["path"], "--input", f"{b}={small['files'][1]}", "--input", f"{a}={small['files'][0]}",
                "--output-dir", tmp_path, "--threads", 2)
    assert p.returncode == 0, p.stderr
    assert np.load(tmp_path / "hidden.npy").tobytes() == python_outputs(small["path"], small["inputs"], 2)[0].tobytes()
    for batch in (1, 5, 64):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        p = run_cli("run", dynamic["path"], "--input", tmp_path / "x.npy", "--output-dir", tmp_path / f"b{batch}",
                    "--threads", 1)
        assert p.returncode == 0, p.stderr
        y = np.load(tmp_path / f"b{batch}" / "y.npy")
        assert y.shape == (batch, 4)
        assert y.tobytes() == python_outputs(dynamic["path"], [x], 1)[0].tobytes()


def test_bench_reports_latency_throughput_and_memory(small, dynamic):
    p = run_cli("bench", small["path"], "--iters", 20, "--threads", 1)
    assert p.returncode == 0, p.stderr
    assert "runs       20 in" in p.stdout
    for word in ("p50", "p90", "p99", "throughput", "peak RSS", "arena"):
        assert word in p.stdout, p.stdout
    assert "\r" not in p.stdout  # no progress line when stdout is not a terminal
    # Some inputs from files (by name), the rest generated; shapes as the files give them.
    a, _ = small["names"]
    p = run_cli("bench", small["path"], "--input", f"{a}={small['files'][0]}", "--iters", 3)
    assert p.returncode == 0 and f"{a}=2,8 " in p.stdout, p.stdout + p.stderr
    _, sig, _ = _C.load_model(str(dynamic["path"]))
    name = sig.to_dict()["inputs"][0]["name"]
    p = run_cli("bench", dynamic["path"], "--shape", f"{name}=8,16", "--iters", 20, "--warmup", 2, "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["iters"] == 20 and r["shapes"] == f"{name}=8,16"
    assert 0 < r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert r["peak_rss_mib"] > 1 and r["throughput_per_s"] > 0
    # A symbolic dim nothing binds: the error says which --shape to give.
    assert_error(run_cli("bench", dynamic["path"], "--iters", 1), "--shape", name)
    # A shape outside the exported range is refused before anything is allocated for it.
    assert_error(run_cli("bench", dynamic["path"], "--shape", f"{name}=100000000000,16", "--iters", 1),
                 "100000000000", "[1, 64]")


def test_bench_progress_line_only_on_a_terminal(small):
    import pty
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([BIN, "bench", str(small["path"]), "--time", "0.5", "--threads", "1"],
                             stdout=slave, stderr=subprocess.PIPE)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        os.close(master)
    text = out.decode()
    assert "\r\x1b[K  run " in text and "p50" in text, text[:300]
    assert "latency    p50" in text  # the summary follows, the progress line cleared


def test_compare_match_mismatch_and_worst_element(small, tmp_path):
    want = python_outputs(small["path"], small["inputs"], 2)
    np.save(tmp_path / "h.npy", want[0])
    np.save(tmp_path / "p.npy", want[1])
    ins = ["--input", small["files"][0], "--input", small["files"][1]]
    p = run_cli("compare", small["path"], *ins, "--expect", tmp_path / "h.npy", "--expect", tmp_path / "p.npy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK (rtol 0.001, atol 0.001)" in p.stdout and p.stdout.strip().endswith("match")
    bad = want[0].copy()
    bad[1, 3, 7] += 0.5
    np.save(tmp_path / "h_bad.npy", bad)
    p = run_cli("compare", small["path"], *ins, "--expect", f"probs={tmp_path / 'p.npy'}",
                "--expect", f"hidden={tmp_path / 'h_bad.npy'}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "hidden f32[2, 8, 32]  MISMATCH" in p.stdout and "1 of 512 elements differ" in p.stdout
    assert f"worst at [1, 3, 7]: got {want[0][1, 3, 7]:.9g}, expected {bad[1, 3, 7]:.9g} (abs error 0.5" in p.stdout
    # NaN matches only NaN: the NaN is the worst element.
    nan = want[0].copy()
    nan[0, 0, 5] = np.nan
    np.save(tmp_path / "h_nan.npy", nan)
    p = run_cli("compare", small["path"], *ins, "--expect", tmp_path / "h_nan.npy", "--expect", tmp_path / "p.npy")
    assert p.returncode == 1 and "1 of 512 elements differ" in p.stdout and "worst at [0, 0, 5]" in p.stdout, p.stdout
    assert "expected nan" in p.stdout
    # A looser tolerance accepts it.
    p = run_cli("compare", small["path"], *ins, "--expect", tmp_path / "h_bad.npy", "--expect", tmp_path / "p.npy",
                "--atol", "0.6")
    assert p.returncode == 0, p.stdout


def test_errors_are_one_line_with_exit_code_2(small, tmp_path):
    path, (f_ids, f_x) = small["path"], small["files"]
    out = ["--output-dir", tmp_path / "o"]
    # Missing model file, missing input file, an unknown option, a missing --output-dir.
    assert_error(run_cli("run", tmp_path / "nope.updraft", "--input", f_ids, *out), "nope.updraft", "No such file")
    assert_error(run_cli("run", path, "--input", tmp_path / "none.npy", "--input", f_x, *out), "[npy]", "cannot open")
    assert_error(run_cli("run", path, "--bogus", *out), "[cli]", "--bogus")
    assert_error(run_cli("run", path, "--input", f_ids, "--input", f_x), "--output-dir")
    assert_error(run_cli("frobnicate", path), "unknown command")
    # Not a .npy file; big-endian; Fortran order; an object array.
    (tmp_path / "junk.npy").write_bytes(b"hello, this is not numpy")
    assert_error(run_cli("run", path, "--input", tmp_path / "junk.npy", "--input", f_x, *out), "[npy]", "not a .npy file")
    np.save(tmp_path / "be.npy", small["inputs"][1].astype(">f4"))
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "be.npy", *out), "big-endian")
    np.save(tmp_path / "fo.npy", np.asfortranarray(small["inputs"][1][0]))
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "fo.npy", *out), "Fortran")
    np.save(tmp_path / "obj.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "obj.npy", *out), "object array")
    # Truncated data.
    good = (Path(f_x)).read_bytes()
    (tmp_path / "cut.npy").write_bytes(good[:-10])
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "cut.npy", *out), "truncated data")
    # Wrong shape (static dim), wrong rank, wrong dtype, wrong count.
    np.save(tmp_path / "shape.npy", np.zeros((2, 8, 31), np.float32))
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "shape.npy", *out),
                 "[2, 8, 31]", "dim 2 must be 32")
    np.save(tmp_path / "rank.npy", np.zeros((16, 32), np.float32))
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "rank.npy", *out), "rank 3")
    np.save(tmp_path / "f64.npy", small["inputs"][1].astype(np.float64))
    assert_error(run_cli("run", path, "--input", f_ids, "--input", tmp_path / "f64.npy", *out), "f64", "astype(np.float32)")
    assert_error(run_cli("run", path, "--input", f_ids, *out), "no --input for input")
    # A corrupt model file is refused by the runtime, as one line.
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "corrupt.updraft").write_bytes(bytes(data))
    assert_error(run_cli("info", tmp_path / "corrupt.updraft"))
    (tmp_path / "trunc.updraft").write_bytes(bytes(data[:100]))
    assert_error(run_cli("info", tmp_path / "trunc.updraft"))
    # Nothing was written for the failed runs.
    assert not (tmp_path / "o").exists()


def test_dynamic_range_violation_is_an_error(dynamic, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((65, 16), np.float32))
    line = assert_error(run_cli("run", dynamic["path"], "--input", tmp_path / "x.npy", "--output-dir", tmp_path))
    assert "65" in line and "64" in line, line


def test_help_per_command():
    for cmd in ("info", "run", "bench", "compare"):
        p = run_cli(cmd, "--help")
        assert p.returncode == 0 and p.stdout.startswith(f"usage: updraft-run {cmd}"), p.stdout
    p = run_cli("--help")
    assert p.returncode == 0 and "bench" in p.stdout
    p = run_cli()
    assert p.returncode == 2 and "usage" in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mlp"])
def test_zoo_model_through_cli_bit_identical_and_close_to_eager(name, tmp_path):
    """A real zoo model: the CLI's outputs equal _C.load_model's bit for bit (2 threads) and
    `compare` against eager PyTorch passes at its default tolerance."""
    from updraft import zoo

    model, args = zoo.build(name)
    outs = ["last_hidden_state", "pooler_output"] if name == "resnet50" else ["y"]
    path = save_model_file(tmp_path / f"{name}.updraft", model, args, outs)
    x = args[0].numpy()
    np.save(tmp_path / "x.npy", x)
    p = run_cli("run", path, "--input", tmp_path / "x.npy", "--output-dir", tmp_path / "out", "--threads", 2)
    assert p.returncode == 0, p.stderr
    for o, w in zip(outs, python_outputs(path, [x], 2)):
        assert np.load(tmp_path / "out" / f"{o}.npy").tobytes() == w.tobytes(), o
    with torch.no_grad():
        eager = model(args[0])
    eager = [eager] if isinstance(eager, torch.Tensor) else [eager.last_hidden_state, eager.pooler_output]
    expects = []
    for o, e in zip(outs, eager):
        np.save(tmp_path / f"eager_{o}.npy", e.numpy())
        expects += ["--expect", tmp_path / f"eager_{o}.npy"]
    p = run_cli("compare", path, "--input", tmp_path / "x.npy", *expects, "--threads", 2)
    assert p.returncode == 0, p.stdout + p.stderr
