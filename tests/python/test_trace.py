"""Seeing the engine's steps on a timeline: updraft.profile(trace=...) writes a Chrome trace /
Perfetto JSON of calls, engine partition calls and engine steps; under torch.profiler each
partition call and each engine step is a record_function range next to PyTorch's own ops."""
import gc
import json
import os
import threading

import pytest
import torch
from torch import nn

import updraft
from updraft import profiler


class LinearGeluLinear(nn.Module):
    """Two engine partitions around gelu, which stays in PyTorch (eager_ops)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(torch.relu(self.a(x)) * 2.0))


_EARLIER: list = []  # partitions made before the current test's model, held so they can be told apart


def _compiled():
    gc.collect()
    _EARLIER[:] = list(profiler._partitions)
    m = LinearGeluLinear().eval()
    cfg = updraft.CompilerConfig(eager_ops=("aten.gelu",), cache_dir="", fuse=False, partition_cost=False)
    return m, torch.compile(m, backend=updraft.get_backend(cfg))


def _engine_partitions():
    """The engine partitions of the model _compiled() made last, by name."""
    return sorted((p for p in profiler._partitions if getattr(p._state, "cg", None) is not None
                   and all(p is not q for q in _EARLIER)), key=lambda p: p.report.name)


def _plan_ops(part):
    """The op of each step of `part`'s plan (it has one), in schedule order."""
    (plan,) = part._state.cg.step_times()
    return [op for _, op, _, _, _ in plan[1]]


def test_trace_file_nests_steps_in_partitions_in_calls(tmp_path):
    m, fast = _compiled()
    x = torch.randn(4, 16)
    path = tmp_path / "trace.json"
    with torch.no_grad():
        prof = updraft.profile(fast, x, runs=3, warmup=1, trace=str(path))
        torch.testing.assert_close(fast(x), m(x))
    assert prof.trace == str(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e), e
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["pid"] == os.getpid()
    calls = [e for e in complete if e["cat"] == "updraft.call"]
    parts = [e for e in complete if e["cat"] == "updraft.partition"]
    steps = [e for e in complete if e["cat"] == "updraft.step"]
    assert len(calls) == 3
    engine = _engine_partitions()
    assert len(engine) == 2  # the partitions before and after gelu
    assert len(parts) == 3 * len(engine)
    eps = 1e-3  # microseconds: float rounding of ns / 1000

    def inside(inner, outer):
        return outer["ts"] - eps <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + eps

    for p in parts:
        assert sum(inside(p, c) for c in calls) == 1, p  # every partition call inside one call
    # The PyTorch side (gelu, Dynamo's guards) is the gap: within a call, partitions leave time.
    for c in calls:
        mine = sorted((p for p in parts if inside(p, c)), key=lambda p: p["ts"])
        assert sorted(p["name"] for p in mine) == [q.report.name for q in engine]
        assert mine[0]["ts"] + mine[0]["dur"] < mine[1]["ts"]
    by_part = {q.report.name: q for q in engine}
    for p in parts:
        mine = sorted((s for s in steps if inside(s, p) and s["args"]["partition"] == p["name"]),
                      key=lambda s: s["ts"])
        assert len(mine) == p["args"]["steps"] > 0
        # Step names are the engine graph's ops, in plan order, with the plan's kernels.
        assert [s["name"] for s in mine] == _plan_ops(by_part[p["name"]])
        assert [s["args"]["step"] for s in mine] == list(range(len(mine)))
        for s in mine:
            assert s["args"]["kernel"] and s["args"]["op"] == s["name"]
            assert s["tid"] == threading.get_native_id()  # the engine ran on the calling thread
        for a, b in zip(mine, mine[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + eps  # sequential, no overlap
    linear_steps = [s for s in steps if s["name"] == "linear"]
    assert {tuple(s["args"]["outputs"]) for s in linear_steps} == {("f32[4, 32]",), ("f32[4, 8]",)}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert f"thread {threading.get_native_id()}" in names


def test_trace_off_leaves_the_fast_path(tmp_path):
    _, fast = _compiled()
    x = torch.randn(4, 16)
    with torch.no_grad():
        updraft.profile(fast, x, runs=2, warmup=1, trace=str(tmp_path / "t.json"))
    assert profiler.tracing is False and profiler._trace is None
    # After tracing the bound fast path serves the calls again (one PlannedCall per partition).
    with torch.no_grad():
        fast(x)
    assert all(len(p._state.calls) == 1 for p in _engine_partitions())


def test_trace_path_is_checked(tmp_path):
    _, fast = _compiled()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        updraft.profile(fast, torch.randn(4, 16), runs=1, trace=str(tmp_path / "no" / "t.json"))


def test_engine_steps_are_ranges_in_torch_profiler(tmp_path):
    m, fast = _compiled()
    x = torch.randn(4, 16)
    with torch.no_grad():
        fast(x)  # compiled outside the profiled region
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = fast(x)
    torch.testing.assert_close(out, m(x))
    engine = _engine_partitions()
    assert len(engine) == 2
    names = [e.name for e in prof.events()]
    for part in engine:
        assert f"updraft::{part.report.name}" in names
    step_names = [n for n in names if n.startswith("updraft::") and "[" in n]
    assert sorted(n.split("::")[1].split(" [")[0] for n in step_names) == sorted(_plan_ops(engine[0]) +
                                                                               _plan_ops(engine[1]))
    assert "aten::gelu" in names  # PyTorch's fallback op in the same profile
    # Each step range lies inside its partition's range, on the same thread.
    evs = {e.name: e for e in prof.events()}
    for part in engine:
        outer = evs[f"updraft::{part.report.name}"]
        inner = [e for e in prof.events() if e.name.startswith("updraft::") and "[" in e.name
                 and outer.time_range.start <= e.time_range.start and e.time_range.end <= outer.time_range.end]
        assert [e.name.split("::")[1].split(" [")[0] for e in sorted(inner, key=lambda e: e.time_range.start)] \
            == _plan_ops(part)
        assert all(e.thread == outer.thread for e in inner)
    # The exported Chrome trace has them too, and key_averages counts them.
    path = tmp_path / "torch_trace.json"
    prof.export_chrome_trace(str(path))
    exported = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert set(step_names) <= exported and "aten::gelu" in exported
    assert any(k.key.startswith("updraft::linear [") for k in prof.key_averages())


def test_profiler_off_after_torch_profiler():
    _, fast = _compiled()
    x = torch.randn(4, 16)
    with torch.no_grad():
        fast(x)
        with torch.profiler.profile():
            fast(x)
        fast(x)  # back on the fast path: bound calls exist and no range is opened
    assert all(len(p._state.calls) == 1 for p in _engine_partitions())
