"""One zoo model in another dtype: eager vs updraft vs aot_eager (PyTorch alone behind the same
Dynamo/AOT front end), interleaved, with the coverage line of the report.

    PYTHONPATH=python python benchmarks/zoo_dtype.py bert float64 "dict(layers=2)" [--rounds 7] [--threads 1]

Prints one line per backend: median ms per call and the fastest round.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import updraft
from updraft import zoo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dtype", help="a torch dtype name: float64, float32, ...")
    ap.add_argument("kwargs", nargs="?", default="dict()", help="zoo.build keyword arguments, e.g. \"dict(layers=2)\"")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dt = getattr(torch, args.dtype)
    # "dict(layers=2)" from the command line: evaluated with nothing but dict in scope.
    kwargs = eval(args.kwargs, {"__builtins__": {}, "dict": dict})  # noqa: S307
    model, inputs = zoo.build(args.model, **kwargs)
    model = model.eval().to(dt)
    inputs = tuple(i.to(dt) if i.is_floating_point() else i for i in inputs)
    with torch.no_grad():
        fns = {"eager": model, "updraft": torch.compile(model, backend="updraft"),
               "aot_eager": torch.compile(model, backend="aot_eager")}
        for f in fns.values():
            f(*inputs)
            f(*inputs)
        print(updraft.last_report().summary().splitlines()[0])
        times: dict = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, f in fns.items():
                t = time.perf_counter()
                f(*inputs)
                times[k].append((time.perf_counter() - t) * 1e3)
    eager = statistics.median(times["eager"])
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:10s} {m:9.2f} ms  (fastest {min(v):.2f})  eager/this {eager / m:.2f}x")


if __name__ == "__main__":
    main()
