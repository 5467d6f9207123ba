"""A decode step's attention written as matmuls (q k^T, then p v; one row of q, 32 heads of 64)
through the engine at a symbolic cache length (the rows kernel, src/kernels/cpu/matmul_rows.cpp)
and at a static one (oneDNN's primitives), alternating, in one process; median us per call and
the max error against torch.

    python tools/attention_matmul_ab.py [--threads 2] [--lengths 64,256,1024] [--rounds 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from updraft import _C

HEADS, E = 32, 64


def graph(length: int | None) -> str:
    n = "s0" if length is None else str(length)
    return f"""graph(%q: f32[{HEADS}, 1, {E}], %k: f32[{HEADS}, {n}, {E}], %v: f32[{HEADS}, {n}, {E}]) {{
  %s = matmul(%q, %k) {{transpose_b=true}}
  %o = matmul(%s, %v)
  return (%o)
}}"""


def bench(cg, length: int, reps: int) -> tuple[float, float]:
    q, k, v = torch.randn(HEADS, 1, E), torch.randn(HEADS, length, E), torch.randn(HEADS, length, E)
    out = torch.empty(HEADS, 1, E)
    cg.prepare([[HEADS, 1, E], [HEADS, length, E], [HEADS, length, E]])
    for _ in range(20):
        cg.run([q, k, v], [out])
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        cg.run([q, k, v], [out])
        ts.append(time.perf_counter() - t)
    err = (out - (q @ k.transpose(1, 2)) @ v).abs().max().item()
    return statistics.median(ts) * 1e6, err


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lengths", default="64,256,1024")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=300)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print("| cache length | symbolic: rows kernel us | static: oneDNN us | max err (rows, oneDNN) |")
    print("|---|---|---|---|")
    for length in map(int, args.lengths.split(",")):
        for _ in range(args.rounds):
            rows = _C.compile(_C.parse_graph(graph(None)), {})
            static = _C.compile(_C.parse_graph(graph(length)), {})
            a, ea = bench(rows, length, args.reps)
            b, eb = bench(static, length, args.reps)
            print(f"| {length} | {a:.1f} | {b:.1f} | {ea:.1e}, {eb:.1e} |", flush=True)


if __name__ == "__main__":
    main()
