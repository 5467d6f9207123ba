"""Measures the constants of the partition cost rule (python/updraft/partition_cost.py) and checks
its verdicts against timings.

    PYTHONPATH=python python benchmarks/partition_cost.py [--reps 7] [--threads 1]

Part 1 prints the constants as this machine gives them:
  eager op   - one more aten op in a graph PyTorch runs (the fallback GraphModule): the slope
               of a chain of tiny pointwise ops under backend="aot_eager";
  engine call - one more engine partition between PyTorch islands: a chain where every k-th op
               is forced to PyTorch (CompilerConfig.eager_ops), against the same chain under
               aot_eager, per partition, plus the eager ops the partition replaced;
  copy bw    - torch's copy of a 32 MB tensor, bytes per microsecond.
Part 2 runs island chains (partitions of k = 1..4 pointwise ops, tiny and large tensors) with the
cost rule off and on, interleaved, and prints each against aot_eager: with the rule on, no row
may be slower than aot_eager beyond noise. Medians of --reps interleaved rounds; spreads shown.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import updraft
from updraft.config import CompilerConfig


class Chain(torch.nn.Module):
    """`n` rounds of (k pointwise ops in the engine, then one add forced to PyTorch)."""

    def __init__(self, rounds: int, k: int) -> None:
        super().__init__()
        self.rounds, self.k = rounds, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.rounds):
            for j in range(self.k):
                x = x * 1.0001 if j % 2 == 0 else torch.relu(x)
            x = x + 0.5
        return x


def per_call_us(fn, x: torch.Tensor, calls: int) -> float:
    for _ in range(20):
        fn(x)
    t = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t) / calls * 1e6


def interleaved(fns: dict, x: torch.Tensor, reps: int, calls: int) -> dict:
    times: dict = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            times[k].append(per_call_us(f, x, calls))
    return times


def med(ts: list) -> str:
    m = statistics.median(ts)
    return f"{m:9.1f} ({(max(ts) - min(ts)) / m * 100:4.0f}%)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # Every row compiles the same forward under other backends and sizes: no recompile limit.
    torch._dynamo.config.recompile_limit = 1 << 10
    torch._dynamo.config.accumulated_recompile_limit = 1 << 12
    islands = updraft.get_backend(CompilerConfig(eager_ops=("aten.add",), partition_cost=False))
    with torch.no_grad():
        x = torch.randn(8)
        # Eager op: slope of the chain length under aot_eager (all ops in PyTorch).
        short = torch.compile(Chain(1, 1), backend="aot_eager")
        long = torch.compile(Chain(16, 3), backend="aot_eager")
        t = interleaved({"short": short, "long": long}, x, args.reps, 300)
        ops = 16 * 4 - 2
        eager_op = (statistics.median(t["long"]) - statistics.median(t["short"])) / ops
        # Engine call: 16 one-op partitions against the same chain in PyTorch.
        fn_e = torch.compile(Chain(16, 1), backend="aot_eager")
        fn_u = torch.compile(Chain(16, 1), backend=islands)
        t = interleaved({"aot_eager": fn_e, "updraft": fn_u}, x, args.reps, 300)
        call = (statistics.median(t["updraft"]) - statistics.median(t["aot_eager"])) / 16 + eager_op
        big = torch.randn(8 << 20)
        dst = torch.empty_like(big)
        bw = []
        for _ in range(args.reps):
            s = time.perf_counter()
            dst.copy_(big)
            bw.append(big.numel() * 4 / ((time.perf_counter() - s) * 1e6))
        print(f"eager op {eager_op:.2f} us   engine call (incl. its output) {call:.2f} us   "
              f"copy {statistics.median(bw):.0f} bytes/us   (threads {args.threads})")

        print("\n| chain | numel | aot_eager us | rule off us | rule on us | partitions (on) |")
        print("|---|---:|---:|---:|---:|---:|")
        on_backend = updraft.get_backend(CompilerConfig(eager_ops=("aten.add",)))
        for k in (1, 2, 3, 4):
            for numel in (8, 1 << 16):
                x = torch.randn(numel)
                torch._dynamo.reset()
                fns = {"aot_eager": torch.compile(Chain(8, k), backend="aot_eager"),
                       "off": torch.compile(Chain(8, k), backend=islands),
                       "on": torch.compile(Chain(8, k), backend=on_backend)}
                fns["on"](x)
                parts = updraft.last_report().num_partitions
                t = interleaved(fns, x, args.reps, 100 if numel > 8 else 300)
                print(f"| {k} ops x 8 | {numel} | {med(t['aot_eager'])} | {med(t['off'])} | "
                      f"{med(t['on'])} | {parts} |")


if __name__ == "__main__":
    main()
