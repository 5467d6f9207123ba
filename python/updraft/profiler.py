"""Where the engine's time goes: per-step timing of compiled plans, a Chrome/Perfetto trace of
the engine's steps, and the steps as ranges in torch.profiler.

    compiled = torch.compile(model, backend="updraft")
    prof = updraft.profile(compiled, x, runs=20)   # compiles on the first call if needed
    print(prof)                                    # per op and kernel: ms per run, share
    prof.rows                                      # the same, as dicts
    updraft.profile(compiled, x, trace="trace.json")   # + a trace for chrome://tracing / Perfetto

    with torch.profiler.profile() as p:            # engine steps next to PyTorch's ops
        compiled(x)
    p.export_chrome_trace("torch_trace.json")

While profiling is on, every plan step of every live engine partition is timed with a steady
clock (`Executable.set_profiling`, src/runtime/plan.cpp); the cost is two clock reads per
step. Only the `runs` timed calls are counted (counters are read before and after). "python +
dynamo" is the wall time of a call minus the engine's step time: guards, the AOT wrapper,
fallback ops that ran in PyTorch, and output allocation.

Step by step (`run_observed`): while a trace is being written or torch's profiler is on, an
engine partition call leaves the bound fast path (engine_partition.py checks two flags per
call, nothing more) and runs with a `_C.StepObserver`: the engine calls it before and after
each step, on the calling thread. For a trace it records op, kernel, output types, thread and
the step's clock reads (the same reads that feed the profiling counters); for torch.profiler
it opens a real record_function range per step ("updraft::<op> [<kernel>]", taking the GIL
per step) inside one per partition call ("updraft::<partition>"). So a traced or profiled call
costs more than a plain one (the general call path plus the observer), and only then.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time
import weakref
from typing import Any, Callable, Optional

import torch
import torch.autograd.profiler as _torch_profiler

# Every EnginePartition registers here when it is made (engine_partition.py).
_partitions: "weakref.WeakSet[Any]" = weakref.WeakSet()


# True while updraft.profile(trace=...) runs: engine partitions then run observed
# (engine_partition.py reads it per call, with torch's own profiler flag).
tracing = False
_trace: "Optional[_Trace]" = None


def register(partition: Any) -> None:
    _partitions.add(partition)


def _c():
    from . import _C
    return _C


class _Trace:
    """Chrome trace events ("ph": "X", complete events) on the engine's clock (_C.clock_ns):
    one per whole profiled call, one per engine partition call, one per engine step."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.events: list[dict] = []
        self.lock = threading.Lock()  # partitions may run on several threads

    def _add(self, name: str, cat: str, t0: int, t1: int, tid: int, args: dict) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "ts": t0, "dur": t1 - t0, "pid": self.pid,
                            "tid": tid, "args": args})

    def call(self, index: int, t0: int, t1: int) -> None:
        with self.lock:
            self._add(f"call {index}", "updraft.call", t0, t1, threading.get_native_id(), {"call": index})

    def partition(self, name: str, t0: int, t1: int, records: list) -> None:
        with self.lock:
            self._add(name, "updraft.partition", t0, t1, threading.get_native_id(),
                      {"partition": name, "steps": len(records)})
            for step, op, kernel, outputs, tid, s0, s1 in records:
                self._add(op, "updraft.step", s0, s1, tid,
                          {"op": op, "kernel": kernel, "outputs": outputs, "step": step, "partition": name})

    def write(self, path: str) -> int:
        """Writes the trace (times in microseconds from the first event); returns its event count."""
        base = min((e["ts"] for e in self.events), default=0)
        events = [{**e, "ts": (e["ts"] - base) / 1e3, "dur": e["dur"] / 1e3} for e in self.events]
        meta = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0, "args": {"name": "updraft.profile"}}]
        for tid in sorted({e["tid"] for e in events}):
            meta.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                         "args": {"name": f"thread {tid}"}})
        with open(path, "w") as f:
            json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms",
                       "otherData": {"source": "updraft.profile", "clock": "CLOCK_MONOTONIC"}}, f)
        return len(events)


def run_observed(part: Any, st: Any, args: tuple) -> Any:
    """One call of engine partition `part` with its steps observed: recorded for the trace
    updraft.profile is writing, and/or as torch.profiler ranges when torch's profiler is on."""
    C = _c()
    trace = _trace
    if _torch_profiler._is_profiler_enabled:
        obs = C.StepObserver(record=trace is not None, enter=torch.ops.profiler._record_function_enter_new,
                             exit=torch.ops.profiler._record_function_exit._RecordFunction)
        rf: Any = _torch_profiler.record_function(f"updraft::{part.report.name}")
    else:
        obs, rf = C.StepObserver(record=True), None
    t0 = C.clock_ns()
    try:
        if rf is None:
            return part._run_general(st, args, obs)
        with rf:
            try:
                return part._run_general(st, args, obs)
            finally:
                obs.close()  # a step that raised left its range open: closed inside the partition's
    finally:
        if trace is not None:
            trace.partition(part.report.name, t0, C.clock_ns(), obs.records())


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
    trace: Optional[str] = None  # the Chrome trace written (profile(trace=...)), or None

    def __str__(self) -> str:
        other = max(self.wall_ms - self.engine_ms, 0.0)
        lines = [f"updraft profile: {self.runs} runs, median wall {self.wall_ms:.3f} ms per call, "
                 f"engine steps {self.engine_ms:.3f} ms, python + dynamo + fallbacks {other:.3f} ms",
                 "", "| op | kernel | steps | ms per run | share |", "|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['op']} | {r['kernel']} | {r['steps']} | {r['ms_per_run']:.3f} | {100 * r['share']:.1f}% |")
        return "\n".join(lines)


def profile(fn: Callable[..., Any], *args: Any, runs: int = 20, warmup: int = 2, trace: Optional[str] = None,
            train: bool = False, **kwargs: Any) -> Profile:
    """Calls `fn(*args, **kwargs)` warmup + runs times and reports the engine's step times.

    `fn` is usually a torch.compile'd model (backend="updraft"); the warm-up calls compile it.
    Runs under torch.no_grad(); train=True runs with autograd on instead, for a training step
    (`fn` runs forward, backward and maybe the optimizer; the training forward and backward
    graphs are profiled together). Only partitions that have run at least once are profiled.
    trace: a path; the timed calls are also written there as a Chrome trace / Perfetto JSON
    ("traceEvents" of complete events, microseconds): one range per call, per engine
    partition call and per engine step (op, kernel, output types, thread), so the time spent
    in PyTorch (Dynamo, fallback ops) shows as the gaps between partitions. Tracing makes
    each partition call take the observed path, which costs a few microseconds more than the
    bound fast path: the wall times of a traced profile include that.
    """
    global tracing, _trace
    if runs < 1:
        raise ValueError(f"[updraft.profile] runs must be >= 1, got {runs}")
    if trace is not None:
        trace = os.fspath(trace)
        parent = os.path.dirname(os.path.abspath(trace))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"[updraft.profile] trace={trace!r}: folder {parent} does not exist; "
                                    "create it or pass another path")
    from .training import engine_only

    # engine_only: the engine runs every call, even where CompilerConfig(inference="auto") is
    # still timing it against eager or has left the graph to PyTorch.
    with torch.enable_grad() if train else torch.no_grad(), engine_only():
        for _ in range(max(warmup, 1)):
            fn(*args, **kwargs)
        graphs = _live_graphs()
        if not graphs:
            raise RuntimeError("[updraft.profile] no engine partition has run: is `fn` compiled with "
                               "backend='updraft', and did the engine take any of its graph? "
                               "(see updraft.explain)")
        for _, cg in graphs:
            cg.set_profiling(True)
        rec = _Trace() if trace is not None else None
        clock = _c().clock_ns
        try:
            if rec is not None:
                _trace, tracing = rec, True
            before = _snapshot(graphs)
            walls = []
            for i in range(runs):
                t0 = clock()
                fn(*args, **kwargs)
                t1 = clock()
                walls.append((t1 - t0) / 1e6)
                if rec is not None:
                    rec.call(i, t0, t1)
            after = _snapshot(graphs)
        finally:
            if rec is not None:
                tracing, _trace = False, None
            for _, cg in graphs:
                cg.set_profiling(False)
    if rec is not None:
        rec.write(trace)
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
                   rows=rows, trace=trace)
