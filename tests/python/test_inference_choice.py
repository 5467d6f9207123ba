"""CompilerConfig(inference="auto"): each inference graph is timed against Dynamo's graph run
eagerly over its first calls, and left to PyTorch only when PyTorch was faster in every trial
(backend._inference_timed_against_eager, training.MeasuredChoice with prefer_engine)."""
import time

import pytest
import torch

import updraft
from updraft import CompilerConfig, get_backend
from updraft import engine_partition as part_mod
from updraft.training import SETUP_STREAK_LIMIT, MeasuredChoice


def _sides(costs: dict, now: list, calls: list, setup: list = None):
    """Fake sides: each call advances the fake clock by the next cost of its side; an engine
    call whose cost is negative "builds a plan" (bumps `setup`) and costs its absolute value."""
    def side(name):
        def run(args):
            calls.append(name)
            c = costs[name].pop(0) if costs[name] else 1.0
            if c < 0 and setup is not None:
                setup[0] += 1
            now[0] += abs(c)
            return [sum(args)]
        return run
    return side("engine"), side("pytorch")


def _run_choice(costs: dict, n: int = 12, setup: list = None) -> tuple:
    """Runs a prefer_engine MeasuredChoice over fake sides n times: (sides called, choices)."""
    now, calls, chosen = [0.0], [], []
    engine, eager = _sides(costs, now, calls, setup)
    choice = MeasuredChoice(engine, eager, lambda c, e, p: chosen.append((c, e, p)), trials=3,
                            clock=lambda: now[0], prefer_engine=True,
                            engine_setup=(lambda: setup[0]) if setup is not None else None)
    for i in range(n):
        assert choice([1, i]) == [1 + i]  # the values whichever side ran
    return calls, chosen


def test_pytorch_only_when_faster_in_every_trial():
    # First call of each side untimed, then 3 trials each: PyTorch's slowest (1.5) beats the
    # engine's fastest (2.0).
    calls, chosen = _run_choice({"engine": [9, 2.0, 2.5, 3.0], "pytorch": [9, 1.0, 1.5, 1.2]})
    assert calls[:8] == ["engine", "pytorch"] * 4 and calls[8:] == ["pytorch"] * 4
    assert chosen == [("pytorch", pytest.approx(2500.0), pytest.approx(1200.0))]


def test_overlapping_trials_keep_the_engine():
    # PyTorch's median is lower, but one engine trial was faster than one of PyTorch's (a burst
    # of load during the trials): the engine keeps the graph.
    calls, chosen = _run_choice({"engine": [9, 2.0, 1.1, 3.0], "pytorch": [9, 1.0, 1.5, 1.2]})
    assert calls[8:] == ["engine"] * 4
    assert chosen == [("engine", pytest.approx(2000.0), pytest.approx(1200.0))]


def test_engine_calls_that_build_a_plan_are_not_trials():
    # The engine's first two calls build a plan (the first shape, then a new one): neither is
    # timed and the engine runs again, so every trial is a warm call (the 50 s one is not).
    calls, chosen = _run_choice({"engine": [-9, -50, 2.0, 2.1, 2.2, 2.3], "pytorch": [9, 1.0, 1.1, 1.2]},
                                setup=[0])
    assert calls[:4] == ["engine", "engine", "engine", "pytorch"]
    # Trials: the engine's four warm calls (it ran once more before PyTorch had its three).
    assert chosen == [("pytorch", pytest.approx(2150.0), pytest.approx(1100.0))]


def test_a_new_shape_every_call_keeps_the_engine_without_running_pytorch():
    calls, chosen = _run_choice({"engine": [-5.0] * 20, "pytorch": [1.0] * 20}, n=10, setup=[0])
    assert SETUP_STREAK_LIMIT < 10
    assert calls == ["engine"] * 10
    assert len(chosen) == 1 and chosen[0][0] == "engine"


def _convnet():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()


def _choices(report) -> list:
    return [text for g in report.graphs for kind, text in g.compiles if kind == "inference choice"]


def test_a_slower_engine_graph_is_left_to_pytorch_and_explained(monkeypatch):
    # The engine made slower than eager by a sleep in its partition: after the trials the graph
    # runs in PyTorch, the results stay eager's, and the report says why with both times.
    forward = part_mod.EnginePartition.forward

    engine_calls = []

    def slow(self, *args):
        engine_calls.append(1)
        time.sleep(0.05)
        return forward(self, *args)

    monkeypatch.setattr(part_mod.EnginePartition, "forward", slow)
    m = _convnet()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        f = torch.compile(m, backend="updraft")
        for _ in range(10):
            torch.testing.assert_close(f(x), m(x))
    report = updraft.last_report()
    (text,) = _choices(report)
    assert "runs in eager PyTorch" in text, text
    assert "inference=\"auto\"" in str(report) and report.num_engine_compute == 0, str(report)
    before = len(engine_calls)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
    assert len(engine_calls) == before  # not the sleeping engine: PyTorch runs the graph now


def test_the_engine_keeps_a_graph_it_runs_no_slower_and_engine_mode_never_times():
    m = _convnet()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        f = torch.compile(m, backend=get_backend(CompilerConfig(inference="engine")))
        for _ in range(10):
            torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
    report = updraft.last_report()
    assert _choices(report) == [] and report.num_engine_compute > 0, str(report)


def test_inference_mode_is_checked():
    with pytest.raises(ValueError, match=r"inference='fast'.*\"auto\""):
        CompilerConfig(inference="fast")
