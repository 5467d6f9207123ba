"""One model's training step (forward, cross-entropy loss, backward, AdamW), eager or the engine,
each mode in a fresh process and the modes interleaved: an A/B for a training lever, and the
engine's per-op profile of the step.

    python tools/train_step.py                                    # resnet50 batch 8: eager, engine; 3 rounds
    python tools/train_step.py --model vit --batch 4 --rounds 1
    python tools/train_step.py --modes engine --profile           # updraft.profile of the step
    python tools/train_step.py --modes engine --profile --trace step.json   # and its Chrome trace
    python tools/train_step.py --modes engine,engine:convolution_backward   # engine without a lowering
    python tools/train_step.py --modes engine,engine-without:fold_transpose_matmul  # without a pass
    python tools/train_step.py --model vit --batch 4 --modes engine,engine@release_saved=False  # a config knob

A mode is `eager`, `aot_eager` or `inductor` (torch's backends: Dynamo and AOTAutograd
without the engine, or Inductor), `engine` (CompilerConfig(training="engine")), `engine:<op>,...`: the
engine with those ops' lowerings removed (an aten op by its name, another namespace's as
`updraft.dropout`), so they run in PyTorch as before the ops existed (an A/B of one engine op
in one build), or `engine-without:<pass>,...`: the engine with those passes disabled
(CompilerConfig.disable_passes), or `engine@<knob>=<value>,...`: the engine with those
CompilerConfig fields (Python literals). The model comes from `updraft.zoo` (random
weights, seed 0), the loss is a cross entropy of its main output against fixed random targets
over the last dim (as `benchmarks/suite.py --train`), 2 threads unless --threads. Printed per
run: the first step's time (the compile), the median of the timed steps (min-max), the
process's peak RSS and, for the engine, the compute ops in the engine per graph kind and the
partition count. For step times
against the peers (Inductor), use `benchmarks/suite.py --train`.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import time

# torch's own backends, as modes: what Dynamo and AOTAutograd cost without the engine
# (aot_eager), or Inductor's step.
TORCH_BACKENDS = ("aot_eager", "inductor")


def _run(args) -> None:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    import updraft
    from updraft import CompilerConfig, get_backend, lowering, zoo

    mode = args.worker
    skip = tuple(mode.split(":", 1)[1].split(",")) if mode.startswith("engine-without:") else ()
    knobs = {}
    if mode.startswith("engine@"):
        for item in mode.split("@", 1)[1].split(","):
            key, _, value = item.partition("=")
            knobs[key] = ast.literal_eval(value)
    if mode.startswith("engine:"):
        for name in mode.split(":", 1)[1].split(","):
            ns, op = name.split(".", 1) if "." in name else ("aten", name)  # updraft.dropout: ours
            del lowering.LOWERINGS[getattr(getattr(torch.ops, ns), op).default]
    torch.manual_seed(0)
    model, inputs = zoo.build(args.model, batch=args.batch)
    model.train()
    with torch.no_grad():
        out = zoo.first_tensor(model(*inputs))
    target = torch.randint(0, out.shape[-1], out.shape[:-1])
    cfg = CompilerConfig(num_threads=args.threads, training="engine", disable_passes=skip, **knobs)
    torch_backend = mode if mode in TORCH_BACKENDS else None
    fast = model if mode == "eager" else torch.compile(model, backend=torch_backend or get_backend(cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.optimizer == "fused")
    opt_step = opt.step
    if args.optimizer == "compiled" and mode != "eager":  # the step in the engine too (or the torch backend)
        opt_step = torch.compile(opt.step, backend=torch_backend or get_backend(dataclasses.replace(cfg, inference="engine")))

    def step():
        opt.zero_grad(set_to_none=True)
        o = zoo.first_tensor(fast(*inputs))
        F.cross_entropy(o.reshape(-1, o.shape[-1]), target.reshape(-1)).backward()
        opt_step()

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    if args.profile:
        print(updraft.profile(step, runs=3, warmup=1, train=True, trace=args.trace))
        return
    ts = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        ts.append((time.perf_counter() - t) * 1e3)
    extra = ""
    if mode != "eager" and torch_backend is None:
        rep = updraft.last_report()
        kinds = ", ".join(f"{k} {e}/{e + f}" for k, (e, f) in rep.compute_by_kind().items())
        extra = f"; {kinds}; {rep.num_partitions} partitions"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{mode:24s} {args.model} b{args.batch}: first step {first:.1f} s, median {statistics.median(ts):.0f} ms "
          f"({min(ts):.0f}-{max(ts):.0f}), peak RSS {peak_mb} MB{extra}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", help="an updraft.zoo model (default resnet50)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--modes", default="eager,engine",
                   help="comma-separated: eager, aot_eager, inductor, engine, engine:<aten ops>, engine-without:<passes>, "
                        "engine@<knob>=<value>")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per mode, interleaved")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run, after 3 untimed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="print updraft.profile of the step instead")
    p.add_argument("--trace", help="with --profile: also write the step's Chrome trace (updraft.profile's trace)")
    p.add_argument("--optimizer", choices=["eager", "compiled", "fused"], default="eager",
                   help="AdamW's step: eagerly (default), torch.compile'd into the engine (engine modes; "
                        "eager's mode runs it eagerly), or AdamW(fused=True)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.trace and not args.profile:
        p.error("--trace needs --profile")
    if args.worker:
        return _run(args)
    # engine:<ops> lists its ops with commas too: a part that is not a mode continues the last.
    modes: list = []
    for part in args.modes.split(","):
        if part in ("eager", "engine") + TORCH_BACKENDS or part.startswith(("engine:", "engine-without:", "engine@")):
            modes.append(part)
        elif modes and modes[-1].startswith(("engine:", "engine-without:", "engine@")):
            modes[-1] += "," + part
        else:
            p.error(f"--modes: {part!r} is not a mode; use eager, aot_eager, inductor, engine, engine:<aten op>[,<aten op>...], "
                    "engine-without:<pass>[,<pass>...] or engine@<knob>=<value>[,<knob>=<value>...]")
    if args.trace and len(modes) > 1:
        p.error("--trace writes one file: give one mode")
    for _ in range(1 if args.profile else args.rounds):
        for m in modes:
            cmd = [sys.executable, __file__, "--worker", m, "--model", args.model, "--batch", str(args.batch),
                   "--steps", str(args.steps), "--threads", str(args.threads), "--optimizer", args.optimizer] + (
                       ["--profile"] if args.profile else []) + (["--trace", args.trace] if args.trace else [])
            subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
