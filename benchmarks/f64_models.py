"""float64 models: eager vs updraft, interleaved, at 1 and 2 threads (docs/BENCHMARKS.md,
"float64 models").

    PYTHONPATH=python python benchmarks/f64_models.py                 # bert convnext resnet50
    PYTHONPATH=python python benchmarks/f64_models.py --models bert --reps 7 --gemm

Each model is a zoo model (random weights) converted with .double(). Per thread count: one
compile, then `reps` rounds of (eager call, compiled call), so both see the same machine load;
the medians are printed with the engine's coverage and partition count, and the max abs error.
--gemm adds GFLOP/s of the engine's f64 GEMM (through a compiled torch.mm) vs torch.mm.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import updraft
from updraft import zoo


def _timed(f, inputs):
    t0 = time.perf_counter()
    f(*inputs)
    return (time.perf_counter() - t0) * 1e3


def bench(name, threads, reps, **kw):
    torch.set_num_threads(threads)
    model, inputs = zoo.build(name, **kw)
    model = model.double()
    inputs = tuple(t.double() if t.is_floating_point() else t for t in inputs)
    with torch.no_grad():
        want = zoo.first_tensor(model(*inputs))
        torch._dynamo.reset()
        fast = torch.compile(model, backend="updraft")
        got = zoo.first_tensor(fast(*inputs))
        rep = updraft.last_report()
        fast(*inputs)
        model(*inputs)
        e, u = [], []
        for _ in range(reps):
            e.append(_timed(model, inputs))
            u.append(_timed(fast, inputs))
    em, um = statistics.median(e), statistics.median(u)
    cov = f"{rep.num_engine_compute}/{rep.num_engine_compute + rep.num_fallback_compute}"
    print(f"| {name} | {threads} | {em:.1f} | {um:.1f} | {em / um:.2f}x | {cov} | {rep.num_partitions} | "
          f"{(got - want).abs().max().item():.1e} |", flush=True)


def gemm(threads, reps):
    torch.set_num_threads(threads)
    for M, N, K in [(512, 512, 512), (128, 768, 768), (128, 3072, 768), (128, 768, 3072)]:
        a = torch.randn(M, K, dtype=torch.float64)
        w = torch.nn.Linear(K, N, bias=False).double().eval()  # constant weight: prepacked
        torch._dynamo.reset()
        f = torch.compile(w, backend="updraft")
        with torch.no_grad():
            f(a)
            t, u = [], []
            for _ in range(reps):
                t.append(_timed(lambda x: torch.mm(x, w.weight.t()), (a,)))
                u.append(_timed(f, (a,)))
        fl = 2 * M * N * K / 1e6
        print(f"| {M}x{N}x{K} | {threads} | {fl / statistics.median(t):.1f} | {fl / statistics.median(u):.1f} |",
              flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="*", default=["bert", "convnext", "resnet50"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--gemm", action="store_true")
    args = p.parse_args()
    print("| model | threads | eager ms | updraft ms | speedup | compute ops in engine | partitions | max err |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        for t in args.threads:
            bench(name, t, args.reps)
    if args.gemm:
        print("\n| M x N x K | threads | torch.mm GFLOP/s | updraft GFLOP/s |\n|---|---|---|---|")
        for t in args.threads:
            gemm(t, max(args.reps, 10))


if __name__ == "__main__":
    main()
