"""A/B of two builds of updraft on the zoo models: is B as fast as A, and are its outputs the same?

    python benchmarks/ab.py --a ../updraft-old/python --b python --models mlp resnet50 bert --rounds 3

A and B are folders holding an `updraft` package with its `_C` extension (for example a copy
of python/ from an older commit after `cmake --build`). Each (round, model, side) runs in its
own subprocess with that folder first on PYTHONPATH, and the sides alternate within a round
(A B, then B A in the next), so a machine that slows down mid-run hurts both alike. Each
process compiles the model once, checks its output against eager, then times calls; a row is
the median over rounds of each process's median latency, with the spread (max - min over
rounds, relative to the median). "same" says whether A's and B's outputs are bit-identical.
Nothing here asserts on timings.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
import updraft
from updraft import zoo
name, out = sys.argv[1], sys.argv[2]
import inspect
kwargs = {k: v for k, v in json.loads(sys.argv[5]).items()
          if k in inspect.signature(zoo.MODELS[name]).parameters}  # --layers: transformer models only
model, inputs = zoo.build(name, seed=0, **kwargs)
with torch.no_grad():
    want = zoo.first_tensor(model(*inputs))
    fast = torch.compile(model, backend="updraft")
    t0 = time.perf_counter()
    got = zoo.first_tensor(fast(*inputs)).detach().clone()
    compile_s = time.perf_counter() - t0
    for _ in range(3):
        fast(*inputs)
    times = []
    t_end = time.perf_counter() + float(sys.argv[4])
    while time.perf_counter() < t_end or len(times) < 10:
        t = time.perf_counter()
        fast(*inputs)
        times.append(time.perf_counter() - t)
times.sort()
torch.save(got, out + ".pt")
json.dump({"ms": 1e3 * times[len(times) // 2], "compile_s": compile_s,
           "err": float((got.double() - want.double()).abs().max())}, open(out, "w"))
"""


def run_one(folder: Path, name: str, threads: int, seconds: float, kwargs: dict, tmp: Path, tag: str) -> dict:
    out = tmp / f"{name}-{tag}.json"
    env = dict(os.environ, PYTHONPATH=str(folder.resolve()), UPDRAFT_CACHE_DIR="")
    subprocess.run([sys.executable, "-c", WORKER, name, str(out), str(threads), str(seconds), json.dumps(kwargs)],
                   env=env, check=True)
    row = json.loads(out.read_text())
    row["out"] = str(out) + ".pt"
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="folder with the A build's updraft package")
    p.add_argument("--b", type=Path, required=True, help="folder with the B build's updraft package")
    p.add_argument("--models", nargs="+", default=["mlp", "resnet50", "mobilenet_v3", "bert", "gpt2_decode"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per process")
    p.add_argument("--layers", type=int, default=None, help="layers for the transformer models (default: zoo's)")
    args = p.parse_args()

    import torch  # only to compare the saved outputs

    print(f"A = {args.a}, B = {args.b}, {args.threads} thread(s), {args.rounds} rounds, "
          f"{args.seconds:g} s timed per process\n")
    print("| model | A ms (spread) | B ms (spread) | B / A | same output | max err vs eager A / B |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in args.models:
            kwargs = {"layers": args.layers} if args.layers else {}
            rows = {"A": [], "B": []}
            same = True
            for r in range(args.rounds):
                order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
                got = {}
                for side in order:
                    folder = args.a if side == "A" else args.b
                    got[side] = run_one(folder, name, args.threads, args.seconds, kwargs, tmp, f"{side}{r}")
                    rows[side].append(got[side])
                same &= torch.equal(torch.load(got["A"]["out"]), torch.load(got["B"]["out"]))

            def stat(side: str) -> tuple[float, float]:
                ms = [x["ms"] for x in rows[side]]
                med = statistics.median(ms)
                return med, (max(ms) - min(ms)) / med

            (a, sa), (b, sb) = stat("A"), stat("B")
            ea, eb = rows["A"][0]["err"], rows["B"][0]["err"]
            print(f"| {name} | {a:.3f} ({100 * sa:.0f}%) | {b:.3f} ({100 * sb:.0f}%) | {b / a:.3f} | "
                  f"{'yes' if same else 'NO'} | {ea:.2e} / {eb:.2e} |", flush=True)


if __name__ == "__main__":
    main()
