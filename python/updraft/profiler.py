"""Where the engine's time goes: per-step timing of compiled plans.

    compiled = torch.compile(model, backend="updraft")
    prof = updraft.profile(compiled, x, runs=20)   # compiles on the first call if needed
    print(prof)                                    # per op and kernel: ms per run, share
    prof.rows                                      # the same, as dicts

While profiling is on, every plan step of every live engine partition is timed with a steady
clock (`Executable.set_profiling`, src/runtime/plan.cpp); the cost is two clock reads per
step. Only the `runs` timed calls are counted (counters are read before and after). "python +
dynamo" is the wall time of a call minus the engine's step time: guards, the AOT wrapper,
fallback ops that ran in PyTorch, and output allocation.
"""
from __future__ import annotations

import collections
import dataclasses
import time
import weakref
from typing import Any, Callable

import torch

# Every EnginePartition registers here when it is made (engine_partition.py).
_partitions: "weakref.WeakSet[Any]" = weakref.WeakSet()


def register(partition: Any) -> None:
    _partitions.add(partition)


def _live_graphs() -> list[Any]:
    graphs = []
    for p in list(_partitions):
        cg = getattr(p._state, "cg", None)
        if cg is not None:
            graphs.append((p.report.name, cg))
    return graphs


def _snapshot(graphs: list[Any]) -> dict:
    snap = {}
    for name, cg in graphs:
        for shapes, steps in cg.step_times():
            for step, op, kernel, calls, ns in steps:
                snap[(id(cg), name, str(shapes), step)] = (op, kernel, calls, ns)
    return snap


@dataclasses.dataclass
class Profile:
    runs: int
    wall_ms: float  # median wall time of one call
    engine_ms: float  # engine step time per call, all partitions
    rows: list[dict]  # per (op, kernel): steps, ms per run, share of engine time

    def __str__(self) -> str:
        other = max(self.wall_ms - self.engine_ms, 0.0)
        lines = [f"updraft profile: {self.runs} runs, median wall {self.wall_ms:.3f} ms per call, "
                 f"engine steps {self.engine_ms:.3f} ms, python + dynamo + fallbacks {other:.3f} ms",
                 "", "| op | kernel | steps | ms per run | share |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['op']} | {r['kernel']} | {r['steps']} | {r['ms_per_run']:.3f} | {100 * r['share']:.1f}% |")
        return "\n".join(lines)


def profile(fn: Callable[..., Any], *args: Any, runs: int = 20, warmup: int = 2, **kwargs: Any) -> Profile:
    """Calls `fn(*args, **kwargs)` warmup + runs times and reports the engine's step times.

    `fn` is usually a torch.compile'd model (backend="updraft"); the warm-up calls compile it.
    Runs under torch.no_grad(). Only partitions that have run at least once are profiled.
    """
    if runs < 1:
        raise ValueError(f"[updraft.profile] runs must be >= 1, got {runs}")
    with torch.no_grad():
        for _ in range(max(warmup, 1)):
            fn(*args, **kwargs)
        graphs = _live_graphs()
        if not graphs:
            raise RuntimeError("[updraft.profile] no engine partition has run: is `fn` compiled with "
                               "backend='updraft', and did the engine take any of its graph? "
                               "(see updraft.explain)")
        for _, cg in graphs:
            cg.set_profiling(True)
        try:
            before = _snapshot(graphs)
            walls = []
            for _ in range(runs):
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                walls.append((time.perf_counter() - t0) * 1e3)
            after = _snapshot(graphs)
        finally:
            for _, cg in graphs:
                cg.set_profiling(False)
    per = collections.defaultdict(lambda: [0, 0])  # (op, kernel) -> [steps, ns]
    for key, (op, kernel, calls, ns) in after.items():
        calls0, ns0 = before.get(key, (op, kernel, 0, 0))[2:]
        if calls > calls0:
            per[(op, kernel)][0] += 1
            per[(op, kernel)][1] += ns - ns0
    total_ns = sum(v[1] for v in per.values()) or 1
    rows = [{"op": op, "kernel": kernel, "steps": n, "ms_per_run": ns / runs / 1e6, "share": ns / total_ns}
            for (op, kernel), (n, ns) in sorted(per.items(), key=lambda kv: -kv[1][1])]
    walls.sort()
    return Profile(runs=runs, wall_ms=walls[len(walls) // 2], engine_ms=total_ns / runs / 1e6 if per else 0.0,
                   rows=rows)
