"""The model-zoo table: each zoo model at batch 1 and 4 through torch.compile(backend="updraft"),
fp32, random weights; prints model, batch, compute ops in the engine (n/m, %), max abs error vs
eager and pass/fail against the tolerance table and the 95% coverage bar of tests/python/test_zoo.py.

    python tools/zoo_table.py                      # the test lane's (cut-depth) configs
    python tools/zoo_table.py --full               # the zoo's published configs (slow)
    python tools/zoo_table.py --models llama,swin --batches 1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))


def main(argv=None) -> int:
    from test_zoo import CASES, scale  # the lane's kwargs and tolerances: one table

    import updraft
    from updraft import zoo

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(sorted(CASES)))
    p.add_argument("--batches", default="1,4")
    p.add_argument("--full", action="store_true", help="published configs instead of the lane's depths")
    args = p.parse_args(argv)
    print("| model | batch | compute ops in engine | max abs err | max abs eager | tol | result | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for name in args.models.split(","):
        kwargs, tol, _ = CASES[name]
        for batch in (int(b) for b in args.batches.split(",")):
            torch._dynamo.reset()
            t0 = time.perf_counter()
            model, inputs = zoo.build(name, batch=batch, **({} if args.full else kwargs))
            with torch.no_grad():
                want = zoo.first_tensor(model(*inputs))
                got = zoo.first_tensor(torch.compile(model, backend="updraft", dynamic=False)(*inputs))
            rep = updraft.last_report()
            eng, total = rep.num_engine_compute, rep.num_engine_compute + rep.num_fallback_compute
            err = (got - want).abs().max().item()
            ok = torch.allclose(got, want, rtol=tol, atol=tol * scale(want)) and rep.coverage >= 0.95 \
                and not rep.failed_partitions
            failed += not ok
            print(f"| {name} | {batch} | {eng}/{total} ({100 * rep.coverage:.1f}%) | {err:.1e} | {scale(want):.1e} | {tol:g} | "
                  f"{'pass' if ok else 'FAIL'} | {time.perf_counter() - t0:.0f} |", flush=True)
            if rep.fallback_ops:
                print(f"|  | | in PyTorch: {', '.join(f'{o} x{n}' for o, n in rep.fallback_ops.most_common(4))} | | | | | |")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
