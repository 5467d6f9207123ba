"""Time of one optimizer step alone: AdamW over a zoo model's parameters with fixed random
gradients, eagerly or `torch.compile(opt.step)` with a backend (docs/BENCHMARKS.md, "Issue 17:
the optimizer step in the engine" and "the optimizer's program").

    python benchmarks/optimizer_step.py --step updraft         # the step in the engine
    python benchmarks/optimizer_step.py --step inductor        # Inductor (first call ~1 min)
    python benchmarks/optimizer_step.py --step fused           # eager AdamW(fused=True)
    python benchmarks/optimizer_step.py --step eager --model mlp --steps 5

Prints the median and minimum of --steps timed steps after --warmup, and the first call's time
(the compile). One configuration per process: run the arms in alternating fresh processes.
"""
from __future__ import annotations

import argparse
import statistics
import time

import updraft  # noqa: F401  (first: its OpenMP settings precede torch's libgomp)
import torch
from updraft import CompilerConfig, get_backend, zoo

STEPS = ("eager", "fused", "updraft", "inductor")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step", choices=STEPS, default="updraft")
    p.add_argument("--model", default="bert", choices=sorted(zoo.MODELS))
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, _ = zoo.build(args.model, batch=1)
    params = list(model.parameters())
    torch.manual_seed(0)
    for q in params:
        q.grad = torch.randn_like(q) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-4, fused=args.step == "fused")
    if args.step == "updraft":
        step = torch.compile(opt.step, backend=get_backend(CompilerConfig(inference="engine")))
    elif args.step == "inductor":
        step = torch.compile(opt.step)
    else:
        step = opt.step
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(args.warmup):
        step()
    ts = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        ts.append((time.perf_counter() - t0) * 1e3)
    n = sum(q.numel() for q in params)
    print(f"{args.step} AdamW step over {args.model}'s {len(params)} parameters ({n / 1e6:.1f}M): "
          f"median {statistics.median(ts):.1f} ms, min {min(ts):.1f} ms, first call {first:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
