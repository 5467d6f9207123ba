"""Eager vs updraft latency of a host-bound model, idle and with a busy-looping neighbour.

    python benchmarks/mlp_load.py                 # MLP (8 x Linear(512)+ReLU), batch 1
    python benchmarks/mlp_load.py --load 1        # the same with one busy process beside it
    python benchmarks/mlp_load.py --model mlp --batch 64 --load 1 --rounds 5

The loaded case is the one issue 4 names: on a 2-core machine a second process keeps one core
busy, and a 2-thread OpenMP region then waits for a thread the scheduler has not run. The busy
neighbour is a separate `python -c "while True: pass"` process started here and killed at the end.
Prints the median of `--rounds` rounds, each round the median of `--iters` calls.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import updraft  # noqa: F401  (first: its default OpenMP wait policy must precede torch's libgomp)
import torch
from updraft import zoo
from updraft.demo import median_ms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp", choices=sorted(zoo.MODELS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--load", type=int, default=0, help="busy-looping neighbour processes to start")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    model, inputs = zoo.build(args.model, batch=args.batch)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        time.sleep(0.2 if hogs else 0)
        with torch.no_grad():
            fast = torch.compile(model, backend="updraft")
            ref = model(*inputs)
            got = fast(*inputs)
            err = (zoo.first_tensor(ref) - zoo.first_tensor(got)).abs().max().item()
            eager, engine = [], []
            for _ in range(args.rounds):
                eager.append(median_ms(model, inputs, warmup=10, iters=args.iters))
                engine.append(median_ms(fast, inputs, warmup=10, iters=args.iters))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    e, u = statistics.median(eager), statistics.median(engine)
    print(f"{args.model} batch {args.batch} load {args.load}: eager {e:.3f} ms  updraft {u:.3f} ms  "
          f"speedup {e / u:.2f}x  max|err| {err:.2e}  (rounds eager {[round(x, 3) for x in eager]}, "
          f"updraft {[round(x, 3) for x in engine]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
