"""CompilerConfig(watchdog_s): an engine call past its limit is reported on stderr (thread,
partition, current step, plan) and stopped with updraft._C.WatchdogTimeout, which reaches the
caller instead of becoming a silent PyTorch fallback; within its limit a watched call returns
what an unwatched one does. No fault switch: the slow call is real work."""
import pytest
import torch
from torch import nn

import updraft
from updraft import _C, profiler


class MatmulChain(nn.Module):
    """30 sequential [1024, 1024] matmuls: each step takes milliseconds, the chain far longer
    than a 50 ms limit."""

    def __init__(self, n=30, d=1024):
        super().__init__()
        self.ws = nn.ParameterList(nn.Parameter(torch.randn(d, d) / d ** 0.5) for _ in range(n))

    def forward(self, x):
        for w in self.ws:
            x = x @ w
        return x


def _backend(**kw):
    return updraft.get_backend(updraft.CompilerConfig(cache_dir="", **kw))


def test_a_long_engine_call_is_reported_and_raised(capfd):
    m = MatmulChain().eval()
    x = torch.randn(1024, 1024)
    earlier = list(profiler._partitions)  # held, so the new partition is told apart by identity
    fast = torch.compile(m, backend=_backend(watchdog_s=0.05))  # fallback=True, the default
    capfd.readouterr()
    with torch.no_grad(), pytest.raises(_C.WatchdogTimeout) as info:
        fast(x)
    err = capfd.readouterr().err
    msg = str(info.value)
    assert isinstance(info.value, _C.UpdraftError)
    assert msg.startswith("[runtime] watchdog: the engine call of graph 'updraft_partition_")
    assert "exceeded 0.05 s at step " in msg and "(matmul, " in msg
    assert "raise CompilerConfig(watchdog_s)" in msg
    # The report: every in-flight call with its thread, partition, step (op, kernel, shapes), and the plan.
    assert "[updraft] watchdog: engine calls in flight (1):" in err
    assert "(late):" in err and ": matmul [" in err
    assert "(f32[1024, 1024], f32[1024, 1024]) -> (f32[1024, 1024])" in err
    assert "plan for inputs [1024, 1024]" in err
    # Not taken for an engine fault: the partition stays in the engine (no fallback, no warning).
    parts = [p for p in profiler._partitions if all(p is not q for q in earlier)]
    assert len(parts) == 1 and f"graph '{parts[0]._state.cg.label}'" in msg
    assert parts[0].report.status == "ok" and not isinstance(parts[0]._state, str)
    assert "running this partition in PyTorch" not in err


def test_a_watched_call_within_its_limit_returns_the_same_output(capfd):
    m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
    x = torch.randn(8, 64)
    plain = torch.compile(m, backend=_backend())
    with torch.no_grad():
        want = [plain(x), plain(x)]  # the second call takes the bound fast path
    torch._dynamo.reset()
    watched = torch.compile(m, backend=_backend(watchdog_s=30))
    capfd.readouterr()
    with torch.no_grad():
        got = [watched(x), watched(x)]
    assert "watchdog" not in capfd.readouterr().err
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_watchdog_s_is_validated(monkeypatch):
    monkeypatch.delenv("UPDRAFT_WATCHDOG_S", raising=False)
    assert updraft.CompilerConfig().watchdog_s is None
    assert "watchdog_s" not in updraft.CompilerConfig().engine_options()
    assert "watchdog_s" not in updraft.CompilerConfig(watchdog_s=0).engine_options()  # 0: off
    assert updraft.CompilerConfig(watchdog_s=2).engine_options()["watchdog_s"] == 2.0
    for bad, kind in ((-1, ValueError), (float("inf"), ValueError), (float("nan"), ValueError),
                      ("10", TypeError), (True, TypeError)):
        with pytest.raises(kind, match="watchdog_s"):
            updraft.CompilerConfig(watchdog_s=bad)
    monkeypatch.setenv("UPDRAFT_WATCHDOG_S", "0.5")
    assert updraft.CompilerConfig().watchdog_s == 0.5
    monkeypatch.setenv("UPDRAFT_WATCHDOG_S", "soon")
    with pytest.raises(ValueError, match="UPDRAFT_WATCHDOG_S"):
        updraft.CompilerConfig()
    monkeypatch.setenv("UPDRAFT_WATCHDOG_S", "-3")
    with pytest.raises(ValueError, match="UPDRAFT_WATCHDOG_S"):
        updraft.CompilerConfig()
    # Not in the compile-cache key: it changes no optimised graph.
    assert "watchdog_s" not in updraft.CompilerConfig(watchdog_s=1).cache_options()
