"""The main job: compile a real model with torch.compile(backend="updraft"), check it against
eager PyTorch, and print eager vs updraft latency and compile time.

    python -m updraft.demo                    # ResNet-50, batch 1
    python -m updraft.demo --model bert       # BERT-base, seq 128
    python -m updraft.demo --model gpt2 --inductor   # also time Inductor in the same run
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from . import zoo


def median_ms(fn, inputs, warmup: int, iters: int) -> float:
    """Median wall time of fn(*inputs) in ms over `iters` calls after `warmup` calls."""
    for _ in range(warmup):
        fn(*inputs)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50", choices=sorted(zoo.MODELS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--inductor", action="store_true", help="also compile and time Inductor (slow to compile)")
    args = p.parse_args(argv)

    import updraft

    model, inputs = zoo.build(args.model, batch=args.batch)
    print(f"updraft {updraft.__version__} | torch {torch.__version__} | model {args.model} batch {args.batch} | "
          f"threads {torch.get_num_threads()}")
    with torch.no_grad():
        expected = zoo.first_tensor(model(*inputs))

        torch._dynamo.reset()
        compiled = torch.compile(model, backend="updraft")
        t0 = time.perf_counter()
        got = zoo.first_tensor(compiled(*inputs))
        compile_s = time.perf_counter() - t0
        err = (got - expected).abs().max().item()
        ok = torch.allclose(got, expected, rtol=1e-3, atol=1e-3)

        rows = [("eager", median_ms(model, inputs, args.warmup, args.iters), None)]
        rows.append(("updraft", median_ms(compiled, inputs, args.warmup, args.iters), compile_s))
        if args.inductor:
            torch._dynamo.reset()
            ind = torch.compile(model)
            t0 = time.perf_counter()
            ind(*inputs)
            ind_compile = time.perf_counter() - t0
            rows.append(("inductor", median_ms(ind, inputs, args.warmup, args.iters), ind_compile))

    report = updraft.last_report()
    if report is not None:
        print(report.summary())
    print(f"max abs error vs eager: {err:.3g}  ({'OK' if ok else 'MISMATCH'} at rtol=atol=1e-3)")
    eager_ms = rows[0][1]
    print("\n| backend | median latency (ms) | speedup vs eager | first call incl. compile (s) |")
    print("|---|---|---|---|")
    for name, ms, comp in rows:
        print(f"| {name} | {ms:.2f} | {eager_ms / ms:.2f}x | {'' if comp is None else f'{comp:.2f}'} |")
    print(f"\n({args.iters} timed calls after {args.warmup} warm-up, median; rerun: python -m updraft.demo "
          f"--model {args.model} --batch {args.batch}{' --inductor' if args.inductor else ''})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
