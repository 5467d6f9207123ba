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
import math
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
    "swin_t": ("swin", 1),
    "convnext_t": ("convnext", 1),
}
BACKENDS = ["eager", "inductor", "inductor_freeze", "onnxruntime", "openvino", "openvino_convert", "updraft",
            "updraft_load"]
# --train: label -> (zoo model, zoo kwargs). A step is forward, a cross-entropy loss of the main
# output against fixed random targets over its last dim (class logits for the MLP; hidden
# states stand in for a head elsewhere), backward and an AdamW step, with dropout off so that
# the first step's loss can be checked against eager's (docs/training.md); --dropout keeps the
# models' dropout, as a fine-tune runs them (the loss check is then skipped: its masks differ).
TRAIN_MODELS = {
    "mlp": ("mlp", dict(batch=64)),
    "bert": ("bert", dict(batch=4, seq=128)),
    "gpt2": ("gpt2", dict(batch=2, seq=128)),
    "resnet50_b8": ("resnet50", dict(batch=8)),
    "vit": ("vit", dict(batch=4)),
    "swin_t": ("swin", dict(batch=2)),  # windowed attention, patch merges, drop path (rand)
}
# --train backends: the optimizer runs eagerly in every row (--optimizer: compiled with the
# row's backend in the compiled rows, or AdamW(fused=True) everywhere). updraft is the default
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
    "default": {"all": ["eager", "onnxruntime", "openvino", "openvino_convert", "updraft"], "1": ["eager", "updraft"]},
    "inductor": {"all": BACKENDS, "1": ["eager", "updraft"]},
    "full": {"all": BACKENDS, "1": BACKENDS},
    # issue 19's comparison: updraft against eager and the three fp32 peers it must beat, on
    # both thread counts (plain Inductor is left out: freezing is its inference setting).
    "verdict": {t: ["eager", "inductor_freeze", "onnxruntime", "openvino", "openvino_convert", "updraft",
                    "updraft_load"] for t in ("all", "1")},
}
# Peers the suite compares against, pinned so that runs months apart compare the same peers;
# installed on demand (--install-peers), never by scripts/setup.sh or CI. onnxscript is
# torch.onnx's dynamo exporter.
PEERS = {"onnxruntime": "1.32.0", "openvino": "2026.4.1", "onnxscript": "0.7.2"}
# The backends every other row is judged against (win / tie / loss): updraft under torch.compile,
# its model file through updraft.load (no Dynamo or AOTAutograd on the call path, as the
# peers' converter rows have none), and --train's engine-only row.
SUBJECTS = ("updraft", "updraft_load", "updraft_engine")


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
    if backend == "updraft_load":
        return _updraft_load(model, inputs, threads, tmp)
    if backend == "openvino":
        return _openvino_backend(model, inputs, threads)
    if backend == "openvino_convert":
        return _openvino_convert(model, inputs, threads)
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


def _openvino_config(threads: int) -> dict:
    # f32 stated: on CPUs with AVX512-BF16 or AMX OpenVINO's CPU plugin infers in bf16 by default
    # (on this AVX2 machine it is f32 either way); one stream, latency: the suite times one call.
    return {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1",
            "PERFORMANCE_HINT": "LATENCY"}


def _openvino_backend(model, inputs: tuple, threads: int):
    """OpenVINO's torch.compile backend, as it must be set up to run these models.

    With its defaults it ran no convnet or ViT: its own make_fx trace made size symbols in
    Dynamo's shape environment that no graph input explains, and guard building failed with
    `sources must not be empty for symbol sN` (`dynamic=False` does not help: Dynamo's fake mode
    still allows symbols). `aot_autograd` skips that trace. Weights reach it as graph inputs
    with dynamic shapes unless Dynamo's `prepare_freezing` keeps them as attributes it can inline,
    and its CPU plugin rejects a convolution whose weight shape is dynamic. Where OpenVINO
    cannot run a graph the backend falls back to PyTorch (or Inductor) and logs that at DEBUG
    only, so the first call is watched and such a row fails with the reason instead of timing
    PyTorch under OpenVINO's name (GPT-2's DynamicCache concatenates onto an empty tensor,
    which its frontend refuses)."""
    import logging

    import openvino.torch  # noqa: F401  (registers the "openvino" torch.compile backend)
    import torch
    import torch._dynamo.config as dcfg
    from updraft.zoo import first_tensor

    dcfg.prepare_freezing = True
    fast = torch.compile(model, backend="openvino",
                         options={"aot_autograd": True, "device": "CPU", "config": _openvino_config(threads)})
    fell_back: list[str] = []

    class Watch(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if "Failed in OpenVINO" in msg or "Falling back" in msg:
                fell_back.append(" ".join(msg.split())[:400])

    loggers = [logging.getLogger(f"openvino.frontend.pytorch.torchdynamo.{m}") for m in ("backend", "execute")]
    levels = [lg.level for lg in loggers]
    watch = Watch()
    for lg in loggers:
        lg.addHandler(watch)
        lg.setLevel(logging.DEBUG)
    try:
        fast(*inputs)  # compiles and runs once: where a fallback shows
    finally:  # DEBUG only for this call: the backend logs every successful run at DEBUG too
        for lg, level in zip(loggers, levels):
            lg.removeHandler(watch)
            lg.setLevel(level)
    if fell_back:
        raise RuntimeError("OpenVINO's torch.compile backend fell back to PyTorch: " + fell_back[0])
    return (lambda: fast(*inputs)), first_tensor


def _updraft_load(model, inputs: tuple, threads: int, tmp: Path):
    """updraft's deployment path: `updraft.export` of the model's main output to a file, then
    `updraft.load` and calls on torch tensors, as a serving process would (docs/export.md). The
    call path has no Dynamo guards and no AOTAutograd wrapper, which is what the issue's MLP row
    is judged on; the engine graph is the one torch.compile builds (same bits, docs/export.md)."""
    import updraft
    from updraft.zoo import MainOutput  # the main output only: what the suite compares and times

    path = tmp / "model.updraft"
    updraft.export(MainOutput(model).eval(), tuple(inputs), str(path))
    m = updraft.load(str(path), num_threads=threads)
    return (lambda: m(*inputs)), (lambda out: out)  # one output: load returns the tensor itself


def _openvino_convert(model, inputs: tuple, threads: int):
    """OpenVINO's own converter: torch.export of the model's main output, `ov.convert_model`,
    the inputs' shapes pinned (the converter makes every dimension dynamic), compiled for the
    CPU and run through one reused infer request."""
    import openvino as ov
    import torch
    from updraft.zoo import MainOutput  # the main output only: what the suite compares and times

    with torch.no_grad():
        ep = torch.export.export(MainOutput(model).eval(), tuple(inputs))
    _drop_empty_cat_operands(ep.graph_module)
    m = ov.convert_model(ep)
    if len(m.inputs) != len(inputs):
        raise RuntimeError(f"converted model takes {len(m.inputs)} inputs, the model {len(inputs)}")
    m.reshape({port: ov.PartialShape(list(t.shape)) for port, t in zip(m.inputs, inputs)})
    req = ov.Core().compile_model(m, "CPU", _openvino_config(threads)).create_infer_request()
    feeds = [t.detach().contiguous().numpy() for t in inputs]
    # share_outputs: the result's buffer is the request's own, reused by the next call
    return ((lambda: req.infer(feeds, share_inputs=True, share_outputs=True)),
            (lambda res: torch.from_numpy(res[0].copy())))


def _drop_empty_cat_operands(gm) -> None:
    """transformers' DynamicCache starts each layer's cache as an empty 1-D tensor and
    concatenates onto it; torch.cat skips such operands, OpenVINO's frontend refuses them."""
    import torch

    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.cat.default:
            keep = [a for a in n.args[0] if not (isinstance(a, torch.fx.Node) and "val" in a.meta
                                                 and tuple(a.meta["val"].shape) == (0,))]
            if 0 < len(keep) < len(n.args[0]):
                n.args = (keep, *n.args[1:])
    gm.recompile()


def reset_peak_rss() -> None:
    """Starts this process's peak RSS (VmHWM, ru_maxrss) over from its current RSS (Linux 4.0+:
    clear_refs 5), so a later peak leaves out what was freed before (a model's f32 weights
    released by quantising it). Elsewhere a no-op."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


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


def _train_model(spec: dict):
    """The row's model in train mode (dropout off unless --dropout), its inputs, its loss and
    the eager loss of its first step (from a forward without autograd, so that no reference
    model or saved activations stay resident in the timed process; NaN with --dropout, whose
    masks differ)."""
    import torch
    import torch.nn.functional as F
    from updraft import zoo

    name, kwargs = TRAIN_MODELS[spec["model"]]
    model, inputs = zoo.build(name, **kwargs)
    model.train()
    if not spec.get("dropout"):  # dropout off: the first loss is compared with eager's
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
            if isinstance(getattr(m, "dropout_prob", None), float):
                m.dropout_prob = 0.0
    with torch.no_grad():
        out = zoo.first_tensor(model(*inputs))
        target = torch.randint(0, out.shape[-1], out.shape[:-1])

    def loss_of(out):
        out = zoo.first_tensor(out)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))

    want = math.nan if spec.get("dropout") else loss_of(out).item()
    return model, inputs, loss_of, want


def _train_work(spec: dict) -> dict:
    """What one training step must do at least, for the achieved-rate column and the GEMM-peak
    floor, counted in a process of its own (an eager forward and backward would raise the timed
    rows' peak RSS): `flops` of the forward and backward from torch's FlopCounterMode as in
    work_of (the CPU flash attention's backward counted as torch counts the other attention
    backwards), `bytes` = AdamW's least traffic, seven times the trainable parameters (it reads
    parameter, gradient and two moments and writes three), which streams after the backward."""
    model, inputs, loss_of, _ = _train_model(spec)
    return {"flops": step_flops(lambda: loss_of(model(*inputs)).backward()),
            "bytes": 7 * sum(p.nbytes for p in model.parameters() if p.requires_grad)}


def step_flops(step) -> int:
    """FlopCounterMode's count over `step()` (an inference call, or a forward and its backward),
    with torch's CPU flash attention and its backward, which its table lacks."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count

    aten = torch.ops.aten
    sdpa_bwd = lambda g, q, k, v, *a, out_shape=None, **kw: sdpa_backward_flop_count(g, q, k, v)  # noqa: E731
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: sdpa_bwd}
    with FlopCounterMode(display=False, custom_mapping=mapping) as fc:
        step()
    return fc.get_total_flops()


def _train_worker(spec: dict) -> dict:
    """One --train row: time per training step (forward, loss, backward, AdamW)."""
    import torch
    import updraft
    from updraft import CompilerConfig, get_backend

    model, inputs, loss_of, want = _train_model(spec)
    backend, threads = spec["backend"], spec["threads"]
    if backend == "eager":
        compiler = None
    elif backend == "inductor":
        compiler = "inductor"
    elif backend in ("updraft", "updraft_engine"):
        forced = backend == "updraft_engine"
        compiler = get_backend(CompilerConfig(num_threads=threads, training="engine" if forced else "auto",
                                              inference="engine" if forced else "auto"))
    else:
        raise ValueError(f"{backend} has no training mode (inference only)")
    fast = model if compiler is None else torch.compile(model, backend=compiler)
    optimizer = spec.get("optimizer", "eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=optimizer == "fused")
    # --optimizer compiled: the step through the row's backend (an inference graph writing every
    # parameter and moment; docs/training.md, "The optimizer step"); eager's row runs it eagerly.
    opt_step = torch.compile(opt.step, backend=compiler) if optimizer == "compiled" and compiler else opt.step

    model_report: list = []  # the model's graphs' report, taken before the optimizer's compile

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(fast(*inputs))
        loss.backward()
        if not model_report:
            model_report.append(updraft.last_report())
        opt_step()
        return loss

    res: dict = {}
    t0 = time.perf_counter()
    first = step()
    res["compile_s"] = time.perf_counter() - t0
    res["max_err"] = abs(first.item() - want)
    ts = _time_calls(step, spec["min_time"], spec["min_iters"], spec["max_iters"], spec["warmup"])
    q = statistics.quantiles(ts, n=4) if len(ts) >= 4 else [min(ts), 0, max(ts)]
    res.update(median_ms=statistics.median(ts), iqr_ms=q[2] - q[0], iters=len(ts))
    if backend.startswith("updraft"):
        rep = model_report[0]
        if rep is not None:
            kinds = rep.compute_by_kind()
            res["engine_ops"] = ", ".join(f"{k.replace('training ', '')} {e}/{e + f}" for k, (e, f) in kinds.items())
            opt_rep = updraft.last_report()
            if optimizer == "compiled" and opt_rep is not None and opt_rep is not rep:
                e, f = map(sum, zip(*opt_rep.compute_by_kind().values()))
                res["engine_ops"] += f", optimizer {e}/{e + f}"
            choices = [t.rsplit("; ", 1)[-1].replace("runs in ", "") for g in rep.graphs
                       for k, t in g.compiles if k == "training choice"]
            if choices:
                res["engine_ops"] += " (auto: " + ", ".join(choices) + ")"
    return res


def _sdpa_cpu_flops(q, k, v, *args, out_shape=None, **kwargs) -> int:
    """torch's CPU flash attention is not in FlopCounterMode's table: two matmuls, counted
    dense (a causal mask's skipped half is counted too, as torch counts its CUDA kernels)."""
    *batch, lq, d = q
    return 2 * math.prod(batch) * lq * k[-2] * (d + v[-1])


def work_of(model, inputs: tuple) -> dict:
    """What one call must do at least, for the achieved-rate column: `flops` from torch's
    FlopCounterMode over an eager call (matmuls, convolutions, attention; elementwise ops are
    not counted) and `bytes` = parameters + buffers + inputs + outputs, each read or written
    once (the least traffic a call can make; weights dominate in the memory-bound rows)."""
    import torch

    outs: list = []
    with torch.no_grad():
        flops = step_flops(lambda: outs.extend(torch.utils._pytree.tree_leaves(model(*inputs))))
    seen: set = set()

    def nbytes(ts) -> int:
        total = 0
        for t in ts:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
        return total

    return {"flops": flops, "bytes": nbytes(list(model.parameters()) + list(model.buffers()) + list(inputs) + outs)}


def machine_peaks() -> dict:
    """The machine's fp32 GEMM rate and memory bandwidth at torch's thread count, measured
    (best of several repetitions, so a transient neighbour lowers no figure it did not lower
    every time): GEMM = torch.mm of square f32 matrices (1024-3072: torch's sgemm); read =
    torch.sum or torch.mv over 512 MB, the faster; copy = Tensor.copy_ of 512 MB, counted as
    read + write. The read figure is a floor of the machine's bandwidth, not its peak: ONNX
    Runtime's GPT-2 decode step reads its weights at 1.3x it on the AVX2 EPYC."""
    import torch

    def best(fn, reps):
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    gflops = 0.0
    for n in (1024, 2048, 3072):
        a, b = torch.randn(n, n), torch.randn(n, n)
        c = torch.empty(n, n)
        torch.mm(a, b, out=c)
        gflops = max(gflops, 2 * n**3 / best(lambda: torch.mm(a, b, out=c), 5) / 1e9)
    big = torch.ones(128 * 2**20)  # 512 MB, far past any cache
    dst = torch.empty_like(big)
    dst.copy_(big)
    mat, vec = big.view(8192, -1), torch.ones(big.numel() // 8192)
    # two reads that stream at different rates here (torch.sum's cascade is slower at 1 thread
    # than the gemv a decode step is): the faster is the machine's
    read = big.nbytes / min(best(lambda: big.sum(), 7), best(lambda: torch.mv(mat, vec), 7)) / 1e9
    copy = 2 * big.nbytes / best(lambda: dst.copy_(big), 7) / 1e9
    return {"gemm_gflops": gflops, "read_gbs": read, "copy_gbs": copy, "llc_bytes": _llc_bytes()}


def _llc_bytes() -> int:
    """The largest cache's size (sysfs), 0 when unknown: a row whose bytes fit in it can read
    them faster than memory."""
    unit = {"K": 2**10, "M": 2**20, "G": 2**30}
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            txt = (d / "size").read_text().strip()  # e.g. "32768K"
            size = int(txt[:-1]) * unit[txt[-1]] if txt[-1] in unit else int(txt)
        except (OSError, ValueError):
            continue
        best = max(best, size)
    return best


def worker(spec: dict) -> dict:
    threads = spec["threads"]
    if spec.get("boost"):
        boost_priority()  # before torch starts its threads: they inherit the nice value
    import torch

    torch.set_num_threads(threads)
    if spec.get("peaks"):
        return machine_peaks()
    if spec.get("train"):
        return _train_work(spec) if spec.get("work") else _train_worker(spec)
    from updraft import zoo

    name, batch = MODELS[spec["model"]]
    model, inputs = zoo.build(name, batch=batch)
    res: dict = {}
    res.update(work_of(model, inputs))
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
    _end_session(proc.pid)
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


def _session_pids(sid: int) -> list[int]:
    """Processes of session `sid` (a row's worker and whatever it started, such as Inductor's
    compile workers), read from /proc/PID/stat's sixth field."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


def _end_session(sid: int, wait: float = 30.0) -> None:
    """Kills what is left of a row's session and waits until it is gone, so that the next row
    does not share the cores with the last one's stragglers (an updraft row straight after an
    Inductor row measured BERT at 111 ms against 87-91 ms in fresh runs)."""
    t_end = time.perf_counter() + wait
    while (pids := _session_pids(sid)) and time.perf_counter() < t_end:
        try:
            os.killpg(sid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]), v[3] + v[4]  # total, idle + iowait (guest time is inside user)


def cpu_busy(window: float = 1.0) -> float:
    """Fraction of all cores busy over the next `window` seconds (whoever runs), from
    /proc/stat. The 1-minute load average lags by about a minute, so it is recorded but this
    is what a row waits on."""
    t0, i0 = _cpu_times()
    time.sleep(window)
    t1, i1 = _cpu_times()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def settle(max_wait: float, busy_limit: float) -> dict:
    """Waits (at most `max_wait` s) until the cores are quiet: busy at most `busy_limit` over a
    1 s window. Returns what the row starts under: the busy fraction, the 1-minute load
    average and the seconds waited."""
    t0 = time.perf_counter()
    while True:
        busy = cpu_busy(1.0)
        waited = time.perf_counter() - t0
        if busy <= busy_limit or waited >= max_wait:
            return {"busy": busy, "load1": os.getloadavg()[0], "settle_s": waited}


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


def aggregate(rows: list[dict]) -> list[dict]:
    """One entry per (threads, model, backend) over its runs: the median of the runs' medians
    with their min and max. A row that failed in some runs keeps its good runs (the failures
    are counted in `failed`); with no good run it is failed with the first reason."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["threads_label"], r["model"], r["backend"]), []).append(r)
    aggs = []
    for (label, m, b), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        agg = {k: rs[0].get(k) for k in ("model", "backend", "threads", "threads_label", "train")}
        agg.update(runs=len(rs), good=len(ok), failed=len(rs) - len(ok),
                   status="ok" if ok else rs[0]["status"],
                   peak_rss_mb=max((r.get("peak_rss_mb", float("nan")) for r in rs), default=float("nan")),
                   load1=[r["load1"] for r in rs if "load1" in r], busy=[r["busy"] for r in rs if "busy" in r])
        if ok:
            meds = [r["median_ms"] for r in ok]
            agg.update(median_ms=statistics.median(meds), min_ms=min(meds), max_ms=max(meds),
                       noise=statistics.median(r["iqr_ms"] / r["median_ms"] for r in ok),
                       iters=sum(r["iters"] for r in ok), compile_s=statistics.median(r["compile_s"] for r in ok),
                       max_err=max(r["max_err"] for r in ok),
                       warm_compile_s=None)
            warm = [r["warm_compile_s"] for r in ok if "warm_compile_s" in r]
            if warm:
                agg["warm_compile_s"] = statistics.median(warm)
            for k in ("flops", "bytes", "engine_ops"):
                if k in ok[-1]:
                    agg[k] = ok[-1][k]
        aggs.append(agg)
    return aggs


def verdict(a: dict, b: dict) -> tuple[str, float]:
    """`a` (the subject) against `b`, lower time better: a win when a's slowest run beats b's
    fastest, a loss when a's fastest is slower than b's slowest, a tie when the ranges
    overlap. One run per side has no range, so it gives no verdict. Also b's median over a's."""
    ratio = b["median_ms"] / a["median_ms"]
    if min(a["good"], b["good"]) < 2:
        return "1 run", ratio
    if a["max_ms"] < b["min_ms"]:
        return "win", ratio
    if a["min_ms"] > b["max_ms"]:
        return "loss", ratio
    return "tie", ratio


def _geomean(xs: list[float]) -> float:
    return statistics.geometric_mean(xs) if xs else float("nan")


def geomean_verdict(pairs: list[tuple[dict, dict]]) -> str:
    """The geomean of b/a over models where both ran, with its range from the runs' extremes
    (b's fastest over a's slowest, and the reverse), judged as one row is."""
    if not pairs:
        return "—"
    mid = _geomean([b["median_ms"] / a["median_ms"] for a, b in pairs])
    lo = _geomean([b["min_ms"] / a["max_ms"] for a, b in pairs])
    hi = _geomean([b["max_ms"] / a["min_ms"] for a, b in pairs])
    if any(min(a["good"], b["good"]) < 2 for a, b in pairs):
        return f"{mid:.2f}x (1 run)"
    word = "win" if lo > 1 else "loss" if hi < 1 else "tie"
    return f"{word} {mid:.2f}x ({lo:.2f}-{hi:.2f})"


def achieved(agg: dict, peak: dict | None) -> str:
    """The row's rate against the machine's: GFLOP/s as a share of the GEMM peak where the
    model does more flops per byte than the machine's balance (peak flops / read bandwidth),
    GB/s of the least traffic as a share of the read bandwidth where it does fewer."""
    if not peak or not agg.get("flops") or agg.get("status") != "ok":
        return "—"
    sec = agg["median_ms"] / 1e3
    if agg["flops"] / agg["bytes"] >= peak["gemm_gflops"] / peak["read_gbs"]:
        rate = agg["flops"] / sec / 1e9
        return f"{rate:.0f} GFLOP/s ({100 * rate / peak['gemm_gflops']:.0f}% of GEMM)"
    rate = agg["bytes"] / sec / 1e9
    cached = " (fits in cache)" if agg["bytes"] <= peak.get("llc_bytes", 0) else ""
    return f"{rate:.1f} GB/s ({100 * rate / peak['read_gbs']:.0f}% of read){cached}"


def floor_ms(agg: dict, peak: dict | None) -> float | None:
    """A training row's step time if its counted flops ran at the machine's GEMM rate, AdamW
    streamed its least traffic at the copy bandwidth and nothing else took time (the model's
    work, recorded on every row of it, eager's included)."""
    if not peak or not agg.get("flops"):
        return None
    return agg["flops"] / peak["gemm_gflops"] / 1e6 + agg["bytes"] / peak["copy_gbs"] / 1e6


def _range(a: dict, spec: str = ".2f") -> str:
    if a["good"] < 2:
        return format(a["median_ms"], spec)
    return f"{a['median_ms']:{spec}} ({a['min_ms']:{spec}}-{a['max_ms']:{spec}})"


def tables(aggs: list[dict], peaks: dict | None = None) -> str:
    peaks = peaks or {}
    out = []
    for threads in dict.fromkeys(a["threads_label"] for a in aggs):
        rs = [a for a in aggs if a["threads_label"] == threads]
        n = rs[0]["threads"]
        backends = [b for b in ALL_BACKENDS if any(a["backend"] == b for a in rs)]
        models = list(dict.fromkeys(a["model"] for a in rs))
        find = {(a["model"], a["backend"]): a for a in rs}
        good = lambda m, b: (a := find.get((m, b))) is not None and a["status"] == "ok"  # noqa: E731
        subjects = [b for b in SUBJECTS if b in backends]
        pairs = [(s, b) for s in subjects for b in backends if b not in SUBJECTS]
        head = f"{threads} ({n} threads)" if threads == "all cores" else threads
        what = "median ms per training step" if rs[0].get("train") else "median latency ms"
        runs = max(a["runs"] for a in rs)
        out.append(f"### {head}: {what}" + (f", median of {runs} runs (min-max)" if runs > 1 else "")
                   + " (speedup over eager)\n")
        pk = peaks.get(str(n))
        if pk:
            out.append(f"Machine at {n} thread{'s' if n != 1 else ''}: fp32 GEMM {pk['gemm_gflops']:.0f} GFLOP/s "
                       f"(torch.mm, best of 1024-3072), read {pk['read_gbs']:.1f} GB/s (torch.sum or torch.mv), copy "
                       f"{pk['copy_gbs']:.1f} GB/s (512 MB); last-level cache {pk.get('llc_bytes', 0) / 2**20:.0f} MB.\n")
        floor: dict = {}  # --train with the machine's peaks and the steps' work: model -> floor ms
        if rs[0].get("train"):
            floor = {m: floor_ms(next((a for a in rs if a["model"] == m and a.get("flops")), {}), pk) for m in models}
            floor = floor if any(f is not None for f in floor.values()) else {}
        cols = backends + [f"{s} vs {b}" for s, b in pairs] + (["GEMM-peak floor ms (eager over it)"] if floor else [])
        out.append("| model | " + " | ".join(cols) + " |")
        out.append("|---|" + "---|" * len(cols))
        for m in models:
            cells = []
            e = find[(m, "eager")]["median_ms"] if good(m, "eager") else None
            for b in backends:
                a = find.get((m, b))
                if a is None:
                    cells.append("not run")
                elif a["status"] != "ok":
                    cells.append("failed")
                else:
                    sp = f" {e / a['median_ms']:.2f}x" if e and b != "eager" else ""
                    cells.append(_range(a) + sp)
            for s, b in pairs:
                if good(m, s) and good(m, b):
                    word, ratio = verdict(find[(m, s)], find[(m, b)])
                    cells.append(f"{ratio:.2f}x (1 run)" if word == "1 run" else f"{word} {ratio:.2f}x")
                else:
                    cells.append("—")
            if floor:
                f = floor[m]
                cells.append("—" if f is None else f"{f:.0f}" + (f" ({e / f:.2f}x)" if e else ""))
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        cells = []
        for b in backends:
            both = [m for m in models if good(m, b) and good(m, "eager")]
            cells.append("—" if b == "eager" or not both else
                         f"{_geomean([find[(m, 'eager')]['median_ms'] / find[(m, b)]['median_ms'] for m in both]):.2f}x"
                         + (f" ({len(both)} models)" if len(both) < len(models) else ""))
        for s, b in pairs:
            both = [m for m in models if good(m, s) and good(m, b)]
            cells.append(geomean_verdict([(find[(m, s)], find[(m, b)]) for m in both])
                         + (f" ({len(both)} models)" if len(both) < len(models) else ""))
        if floor:
            both = [m for m in models if floor[m] and good(m, "eager")]
            cells.append("—" if not both else
                         f"({_geomean([find[(m, 'eager')]['median_ms'] / floor[m] for m in both]):.2f}x)"
                         + (f" ({len(both)} models)" if len(both) < len(models) else ""))
        out.append("| geomean | " + " | ".join(cells) + " |")
        out.append("")
        if floor:
            out.append("GEMM-peak floor: the step's matmul and convolution flops (forward and backward, torch's "
                       "FlopCounterMode) at the machine's torch.mm rate above, plus AdamW's least traffic (7 x "
                       "the parameters) at the copy bandwidth; nothing else counted. Eager's step over it is about "
                       "the most any backend can gain over eager on the row while its matmuls and convolutions run "
                       "no faster than torch.mm's best (the engine's have measured up to 1.05x of it) and a "
                       "parameter's optimizer traffic does not fit in cache.\n")
        out.append(f"### {threads}: every row\n")
        out.append("| model | backend | median ms (min-max) | runs | noise (IQR/median) | speedup | achieved | "
                   "cold compile s | warm compile s | peak RSS MB | max abs err | load at start: 1 min (busy) | notes |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for m in models:
            for b in backends:
                a = find.get((m, b))
                if a is None:
                    continue
                load = "—"
                if a["load1"]:
                    load = f"{min(a['load1']):.1f}-{max(a['load1']):.1f} ({100 * max(a['busy']):.0f}%)"
                if a["status"] != "ok":
                    reason = a["status"].replace("|", "\\|")
                    out.append(f"| {m} | {b} | — | {a['runs']} | — | — | — | — | — | "
                               f"{_fmt(a.get('peak_rss_mb'), '.0f')} | — | {load} | {reason} |")
                    continue
                e = find[(m, "eager")]["median_ms"] if good(m, "eager") else None
                sp = f"{e / a['median_ms']:.2f}x" if e else "—"
                noise = f"{100 * a['noise']:.0f}% ({a['iters']} iters)"
                cold = _fmt(a.get("compile_s")) if b != "eager" else "—"
                warm = "—" if b == "eager" else _fmt(a.get("warm_compile_s")) if b in CACHED else "no cache"
                notes = [f"engine ops {a['engine_ops']}"] if a.get("engine_ops") else []
                if a["failed"]:
                    notes.append(f"{a['failed']} of {a['runs']} runs failed")
                out.append(f"| {m} | {b} | {_range(a, '.3f')} | {a['runs']} | {noise} | {sp} | {achieved(a, pk)} | "
                           f"{cold} | {warm} | {a['peak_rss_mb']:.0f} | {a['max_err']:.1e} | {load} | "
                           f"{'; '.join(notes)} |")
        out.append("")
    return "\n".join(out)


def chart(aggs: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"chart not drawn: matplotlib unavailable ({type(e).__name__}: {e}); pip install matplotlib"
    groups = list(dict.fromkeys(a["threads_label"] for a in aggs))
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, 4.2 * len(groups)), squeeze=False)
    for ax, g in zip(axes[:, 0], groups):
        rs = [a for a in aggs if a["threads_label"] == g]
        models = list(dict.fromkeys(a["model"] for a in rs))
        backends = [b for b in ALL_BACKENDS if b != "eager" and any(a["backend"] == b for a in rs)]
        eager = {a["model"]: a["median_ms"] for a in rs if a["backend"] == "eager" and a["status"] == "ok"}
        width = 0.8 / max(len(backends), 1)
        for k, b in enumerate(backends):
            xs, ys, lo, hi = [], [], [], []
            for i, m in enumerate(models):
                a = next((a for a in rs if a["model"] == m and a["backend"] == b), None)
                x = i + (k - (len(backends) - 1) / 2) * width
                if a and a["status"] == "ok" and m in eager:
                    y = eager[m] / a["median_ms"]
                    xs.append(x)
                    ys.append(y)
                    lo.append(y - eager[m] / a["max_ms"])
                    hi.append(eager[m] / a["min_ms"] - y)
                elif a:
                    ax.text(x, 1.0, "x", ha="center", va="bottom", fontsize=8, color="red")
            ax.bar(xs, ys, width, label=b, yerr=[lo, hi], capsize=2, error_kw={"linewidth": 0.7})
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, fontsize=8)
        ax.set_yscale("log")  # speedups span 0.3x to 300x on a loaded machine
        ax.set_ylabel("speedup over eager (log)")
        ax.set_title(f"{g}: median run, whiskers min-max over runs (red x: failed)")
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
    p.add_argument("--dropout", action="store_true",
                   help="--train: keep the models' dropout (default: off, so the first loss matches eager's)")
    p.add_argument("--optimizer", choices=["eager", "compiled", "fused"], default="eager",
                   help="--train: the AdamW step eagerly in every row (default); 'compiled': "
                        "torch.compile(opt.step) with the row's backend (eager's row: eagerly); 'fused': "
                        "AdamW(fused=True) in every row")
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
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed calls after the first, for every backend (default 10: updraft times each "
                        "inference graph against eager over its first 8 calls, CompilerConfig.inference)")
    p.add_argument("--warm", action="store_true", help="also time a warm compile where a cache exists (Inductor)")
    p.add_argument("--boost", action="store_true",
                   help="raise the workers' CPU priority (autogroup and nice -20; root only) so that "
                        "other sessions' load on a shared machine stays out of the timings")
    p.add_argument("--runs", type=int, default=1,
                   help="fresh processes per row, interleaved round-robin over models and backends (the "
                        "backend order rotates each round); tables give the median of the runs' medians with "
                        "min-max and call win/tie/loss against updraft only where the ranges do not overlap "
                        "(3 for a verdict; default 1)")
    p.add_argument("--settle-busy", type=float, default=0.15,
                   help="a row starts once the cores are at most this busy over 1 s (fraction of all cores; "
                        "default 0.15)")
    p.add_argument("--settle-max", type=float, default=60.0,
                   help="seconds a row waits for quiet cores before it starts anyway (default 60)")
    p.add_argument("--no-peaks", action="store_true",
                   help="skip measuring the machine's fp32 GEMM rate and memory bandwidth per thread count "
                        "(and, with --train, counting each model's step work: no achieved or floor columns)")
    p.add_argument("--from-json", type=Path, nargs="+",
                   help="redraw the tables, chart and doc block from raw rows written by --json (several "
                        "files are merged: e.g. the two thread counts run apart)")
    p.add_argument("--install-peers", action="store_true",
                   help="pip-install the pinned peers (" + ", ".join(f"{k}=={v}" for k, v in PEERS.items())
                        + ") into this interpreter's environment and exit")
    p.add_argument("--timeout", type=float, default=900, help="seconds per row before it is reported failed")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "BENCHMARKS.md",
                   help="markdown file to update ('-' for none)")
    p.add_argument("--chart", type=Path, help="PNG chart (default docs/benchmarks.png; --train: docs/train_benchmarks.png)")
    p.add_argument("--json", type=Path, help="raw rows (default docs/benchmarks.json; --train: docs/train_benchmarks.json)")
    p.add_argument("--block", help="write the doc block between `<!-- BLOCK:begin/end -->` markers instead of "
                                   "the suite's own (keeps the last run of another kind in place)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    table = TRAIN_MODELS if args.train else MODELS
    stem = "train_benchmarks" if args.train else "benchmarks"
    args.chart = args.chart or ROOT / "docs" / f"{stem}.png"
    args.json = args.json or ROOT / "docs" / f"{stem}.json"
    if args.models is None:
        args.models = list(table)
    if args.runs < 1:
        p.error("--runs must be at least 1")
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

    if args.install_peers:
        cmd = [sys.executable, "-m", "pip", "install"] + [f"{k}=={v}" for k, v in PEERS.items()]
        print(" ".join(cmd), flush=True)
        return subprocess.call(cmd)

    cmdline = "python benchmarks/suite.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.from_json:
        rows, peaks, meta = [], {}, {}
        for path in args.from_json:
            data = json.loads(path.read_text())
            if isinstance(data, list):  # raw rows of a run before --runs existed
                data = {"rows": data}
            rows += data["rows"]
            peaks.update(data.get("peaks", {}))
            for k, v in data.get("meta", {}).items():
                meta[k] = v if k not in meta or meta[k] == v else f"{meta[k]}; {v}"
        meta.setdefault("machine", "not recorded")
    else:
        rows, peaks, meta = run_rows(args, cmdline)
    aggs = aggregate(rows)
    body = tables(aggs, peaks)
    print(body)
    notes = [chart(aggs, args.chart)]
    if args.json and not args.from_json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "peaks": peaks, "rows": rows}, indent=1))
        notes.append(f"raw rows: {args.json}")
    print("\n".join(notes))
    if str(args.doc) != "-":
        rel = lambda q: os.path.relpath(q, args.doc.parent)  # noqa: E731
        runs = max((r.get("run", 0) for r in rows), default=0) + 1
        how = f"fresh process per row, {runs} runs interleaved round-robin" if runs > 1 else "one process per row"
        doc_body = (f"Machine: {meta['machine']}\n\nPriority: {meta.get('priority', 'normal')}\n\n"
                    f"Command: `{meta.get('command', cmdline).strip()}` ({meta.get('date', '?')}; {how}; median of "
                    f"timed calls, at least {meta.get('min_time', args.min_time):g} s / "
                    f"{meta.get('min_iters', args.min_iters)} calls per row)\n\n{body}\n"
                    f"![speedup over eager]({rel(args.chart)})\n")
        if args.block:
            write_doc(args.doc, doc_body, f"<!-- {args.block}:begin -->", f"<!-- {args.block}:end -->",
                      heading=args.block)
        elif args.train:
            write_doc(args.doc, doc_body, TRAIN_BEGIN, TRAIN_END, heading="Latest training suite run")
        else:
            write_doc(args.doc, doc_body)
        print(f"updated {args.doc}")
    return 0


def rotated(backends: list[str], rnd: int) -> list[str]:
    """Round `rnd`'s backend order: each round starts one backend later, so no backend always
    runs straight after the same neighbour (or first, on the coolest machine)."""
    k = rnd % len(backends)
    return backends[k:] + backends[:k]


def run_rows(args, cmdline: str) -> tuple[list[dict], dict, dict]:
    """Runs every (round, threads, model, backend) row in a fresh process, each after the last
    one's processes are gone and the cores are quiet; returns the raw rows, the machine's
    peaks per thread count and what the doc block says about the run."""
    ncpu = os.cpu_count() or 1
    logs = Path(tempfile.mkdtemp(prefix="updraft-suite-"))
    meta = {"machine": _machine(), "command": cmdline, "date": time.strftime("%Y-%m-%d %H:%M"),
            "runs": args.runs, "min_time": args.min_time, "min_iters": args.min_iters}
    print(f"# updraft benchmark suite\n\nmachine: {meta['machine']}\n\nlogs: {logs}\n", flush=True)
    meta["priority"] = boost_priority() if args.boost else "normal"
    print(f"priority: {meta['priority']}\n", flush=True)
    allowed = TRAIN_BACKENDS if args.train else BACKENDS
    plan = []  # (label, threads, backends in suite order)
    for tl in args.threads:
        n = ncpu if tl == "all" else int(tl)
        label = "all cores" if tl == "all" else f"{n} thread" + ("s" if n != 1 else "")
        preset = TRAIN_BACKENDS if args.train else PRESETS[args.preset]["all" if tl == "all" else "1"]
        plan.append((label, n, [b for b in allowed if b in (args.backends or preset)]))
    env_of = lambda n: dict(os.environ, OMP_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="false")  # noqa: E731
    peaks: dict = {}
    if not args.no_peaks:
        for _, n, _ in plan:
            settle(args.settle_max, args.settle_busy)
            r = _run_child(dict(peaks=True, threads=n, boost=args.boost), args.timeout, env_of(n),
                           logs / f"peaks-{n}.log", done_key="gemm_gflops")
            if r["status"] == "ok":
                peaks[str(n)] = {k: r[k] for k in ("gemm_gflops", "read_gbs", "copy_gbs", "llc_bytes")}
                print(f"[suite] peaks at {n} thread{'s' if n != 1 else ''}: GEMM {r['gemm_gflops']:.0f} GFLOP/s, read "
                      f"{r['read_gbs']:.1f} GB/s, copy {r['copy_gbs']:.1f} GB/s", file=sys.stderr, flush=True)
    work: dict = {}  # --train: model -> the step's flops and least bytes, counted once in a child
    if not args.no_peaks and args.train:
        for m in args.models:
            r = _run_child(dict(model=m, train=True, work=True, threads=plan[0][1], dropout=args.dropout),
                           args.timeout, env_of(plan[0][1]), logs / f"work-{m}.log", done_key="flops")
            if r["status"] == "ok":
                work[m] = {"flops": r["flops"], "bytes": r["bytes"]}
                print(f"[suite] {m}: a training step is {r['flops'] / 1e9:.1f} GFLOP of matmuls and convolutions",
                      file=sys.stderr, flush=True)
    total = args.runs * sum(len(args.models) * len(bs) for _, _, bs in plan)
    rows: list[dict] = []
    t_start = time.perf_counter()
    for rnd in range(args.runs):
        for label, n, backends in plan:
            order = rotated(backends, rnd)
            for m in args.models:
                for b in order:
                    spec = dict(model=m, backend=b, threads=n, min_time=args.min_time, min_iters=args.min_iters,
                                max_iters=args.max_iters, warmup=args.warmup, boost=args.boost, train=args.train,
                                dropout=args.dropout, optimizer=args.optimizer)
                    env = env_of(n)
                    cache = None
                    if b in CACHED:  # a fresh cache directory makes the first compile cold
                        cache = tempfile.mkdtemp(prefix="inductor-cache-", dir=logs)
                        env["TORCHINDUCTOR_CACHE_DIR"] = cache
                    start = settle(args.settle_max, args.settle_busy)
                    row = _run_child(spec, args.timeout, env, logs / f"{m}-{b}-{n}-r{rnd}.log")
                    if cache and args.warm and row["status"] == "ok":
                        warm = _run_child(spec, args.timeout, env, logs / f"{m}-{b}-{n}-r{rnd}-warm.log")
                        if warm["status"] == "ok":
                            row["warm_compile_s"] = warm["compile_s"]
                    row.update(start, model=m, backend=b, threads=n, threads_label=label, train=args.train, run=rnd)
                    if row["status"] == "ok":
                        row.update(work.get(m, {}))
                    rows.append(row)
                    if args.json:  # after every row: a run stopped half-way still redraws (--from-json)
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps({"meta": meta, "peaks": peaks, "rows": rows}, indent=1))
                    brief = (f"{row['median_ms']:.3f} ms, compile {row['compile_s']:.1f} s"
                             if row["status"] == "ok" else row["status"])
                    eta = (time.perf_counter() - t_start) / len(rows) * (total - len(rows)) / 60
                    print(f"[suite] run {rnd + 1}/{args.runs} {label:>10} {m:<13} {b:<16} {brief}  (rss "
                          f"{row['peak_rss_mb']:.0f} MB, {row['wall_s']:.0f} s; load {start['load1']:.1f}, busy "
                          f"{100 * start['busy']:.0f}% after {start['settle_s']:.0f} s; ~{eta:.0f} min left)",
                          file=sys.stderr, flush=True)
    return rows, peaks, meta


if __name__ == "__main__":
    sys.exit(main())
