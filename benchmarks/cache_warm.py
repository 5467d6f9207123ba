"""Compile cache: cold vs warm engine compile, each in a fresh process.

    PYTHONPATH=python python benchmarks/cache_warm.py                    # bert + resnet50, 5 pairs
    PYTHONPATH=python python benchmarks/cache_warm.py --models bert --pairs 3

For each model and pair: a fresh process compiles the model with
`torch.compile(model, backend="updraft", options={"cache_dir": d})` in an empty cache folder
(cold: key + lowering + pass pipeline, `lower_ms + compile_ms` of every partition), then a
second fresh process compiles it again from that folder (warm: key + load + refit, `cache_ms` of
every partition), the entries dated an hour back first so that it pays the refresh of a hit's
modification time as a restart after a while does (`--fresh-entries`: as written, a restart within
the minute). Dynamo tracing, AOTAutograd and partitioning are the same in both and are not
counted; nor is the first plan build, which both do. Automatic garbage collection is off in the workers (see
`worker`). Prints the median cold and warm ms and their ratio as a
markdown table, plus `uptime` (these machines are shared: read figures with the load beside
them). `--worker` is the per-process half; it prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Model name -> zoo build arguments.
CONFIGS = {"bert": {"batch": 1, "seq": 128}, "resnet50": {"batch": 1}}


def worker(name: str, cache_dir: str) -> None:
    import gc
    import torch
    import updraft
    from updraft import zoo

    model, inputs = zoo.build(name, **CONFIGS[name])
    # A full collection of torch + transformers' heap takes ~300 ms and is triggered by
    # allocation counts, so it lands at random inside whatever runs (often the engine build)
    # and would swamp both figures; it is not work the compile does.
    gc.collect()
    gc.disable()
    with torch.no_grad():
        torch.compile(model, backend="updraft", options={"cache_dir": cache_dir})(*inputs)
    rep = updraft.last_report()
    parts = rep.partitions
    print(json.dumps({
        "cache": [p.cache for p in parts],
        "cold_ms": sum(p.lower_ms + p.compile_ms for p in parts),
        "warm_ms": sum(p.cache_ms for p in parts),
        "load_ms": sum(p.compile_ms for p in parts),
    }))


def age_entries(cache_dir: str, seconds: float = 3600.0) -> None:
    """Dates every entry an hour back, as if the cold process ran a while ago: the warm process
    then refreshes each hit's modification time (updraft/cache.py, `REFRESH_SECONDS`), as a
    service restarting after a while does, rather than skipping that write as a restart
    within the minute would (`--fresh-entries`)."""
    t = time.time() - seconds
    for f in os.listdir(cache_dir):
        if f.endswith(".updraft"):
            os.utime(os.path.join(cache_dir, f), (t, t))


def run_one(name: str, cache_dir: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", name, cache_dir], check=True,
                         capture_output=True, text=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(CONFIGS), choices=sorted(CONFIGS))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--fresh-entries", action="store_true",
                    help="leave the entries as the cold process wrote them (a restart within the minute)")
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "CACHE_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    rows = []
    for name in args.models:
        cold, warm, load = [], [], []
        for _ in range(args.pairs):
            with tempfile.TemporaryDirectory(prefix="updraft-cache-bench-") as d:
                c = run_one(name, d)
                if not args.fresh_entries:
                    age_entries(d)
                w = run_one(name, d)
            if not all(s.startswith("miss") for s in c["cache"]) or not all(s == "hit" for s in w["cache"]):
                print(f"warning: {name}: cold {c['cache']}, warm {w['cache']}", file=sys.stderr)
            cold.append(c["cold_ms"])
            warm.append(w["warm_ms"])
            load.append(w["load_ms"])
            print(f"{name}: cold {c['cold_ms']:.1f} ms, warm {w['warm_ms']:.1f} ms "
                  f"(engine load {w['load_ms']:.1f})", file=sys.stderr)
        rows.append((name, statistics.median(cold), statistics.median(warm), statistics.median(load)))
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print()
    print("| model | cold ms | warm ms | of which engine load ms | cold / warm |")
    print("|---|---:|---:|---:|---:|")
    for name, c, w, l in rows:
        print(f"| {name} | {c:.1f} | {w:.1f} | {l:.1f} | {c / w:.1f}x |")


if __name__ == "__main__":
    main()
