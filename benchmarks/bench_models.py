"""Model table: eager vs updraft (and optionally Inductor) on the zoo models, in one run.

    python benchmarks/bench_models.py                      # resnet50 bert gpt2 vit, batch 1
    python benchmarks/bench_models.py --models mlp bert --inductor --iters 30

For each model: ops in the engine vs fallback, max abs error vs eager, median latency of
eager / updraft (/ Inductor) and the speedup, and the compile time (first call, which includes
Dynamo tracing + AOTAutograd + the engine compile; the engine's own share is printed apart).
Medians, not means: these machines are shared and noisy. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
import torch

import updraft  # the installed package (bash scripts/setup.sh), which carries the engine
from updraft import zoo
from updraft.demo import median_ms


def bench(name, args):
    model, inputs = zoo.build(name, batch=args.batch)
    row = {"model": name}
    with torch.no_grad():
        want = zoo.first_tensor(model(*inputs))
        row["eager"] = median_ms(model, inputs, args.warmup, args.iters)

        torch._dynamo.reset()
        fast = torch.compile(model, backend="updraft")
        t0 = time.perf_counter()
        got = zoo.first_tensor(fast(*inputs))
        row["compile_s"] = time.perf_counter() - t0
        rep = updraft.last_report()
        row["engine_ms"] = sum(p.compile_ms for p in rep.partitions) if rep else float("nan")
        row["ops"] = f"{rep.num_engine_compute}/{rep.num_engine_compute + rep.num_fallback_compute}" if rep else "?"
        row["err"] = (got - want).abs().max().item()
        row["updraft"] = median_ms(fast, inputs, args.warmup, args.iters)

        if args.inductor:
            torch._dynamo.reset()
            ind = torch.compile(model)
            t0 = time.perf_counter()
            ind(*inputs)
            row["ind_compile_s"] = time.perf_counter() - t0
            row["inductor"] = median_ms(ind, inputs, args.warmup, args.iters)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["resnet50", "bert", "gpt2", "vit"], choices=sorted(zoo.MODELS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed calls (default 10: past updraft's timing against eager, CompilerConfig.inference)")
    p.add_argument("--inductor", action="store_true")
    args = p.parse_args(argv)

    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, updraft {updraft.__version__}, batch {args.batch}, "
          f"median of {args.iters}\n")
    head = "| model | compute ops in engine | max abs err | eager ms | updraft ms | speedup |"
    sep = "|---|---|---|---|---|---|"
    if args.inductor:
        head += " inductor ms | updraft vs inductor |"
        sep += "---|---|"
    head += " updraft compile s (engine ms) |"
    sep += "---|"
    if args.inductor:
        head += " inductor compile s |"
        sep += "---|"
    print(head)
    print(sep)
    for name in args.models:
        r = bench(name, args)
        line = (f"| {name} | {r['ops']} | {r['err']:.2e} | {r['eager']:.2f} | {r['updraft']:.2f} | "
                f"{r['eager'] / r['updraft']:.2f}x |")
        if args.inductor:
            line += f" {r['inductor']:.2f} | {r['inductor'] / r['updraft']:.2f}x |"
        line += f" {r['compile_s']:.2f} ({r['engine_ms']:.0f}) |"
        if args.inductor:
            line += f" {r['ind_compile_s']:.2f} |"
        print(line, flush=True)
    print(f"\nreproduce: python benchmarks/bench_models.py {' '.join(argv or sys.argv[1:])}")


if __name__ == "__main__":
    main()
