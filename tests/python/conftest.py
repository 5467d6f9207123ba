import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch: no cached graphs, no recompile limits carried over."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def pytest_collection_modifyitems(config, items):
    """The full OpInfo sweep (@pytest.mark.opinfo_full, tens of minutes) runs only when the
    -m expression names it (`pytest -m opinfo_full`); otherwise its items are deselected."""
    if "opinfo_full" in (config.getoption("markexpr") or ""):
        return
    keep = [it for it in items if it.get_closest_marker("opinfo_full") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fuzz: the time-bounded differential fuzz (tests/python/test_diff_fuzz.py; "
                   "UPDRAFT_DIFF_FUZZ_SECONDS sets its budget)")


@pytest.fixture
def engine_compiles(monkeypatch):
    """A list that grows by one per engine compile (C.compile call), Dynamo reset around it."""
    from updraft import _C

    calls = []
    real = _C.compile

    def spy(graph, options=None):
        calls.append(1)
        return real(graph, options if options is not None else {})

    monkeypatch.setattr(_C, "compile", spy)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()


@pytest.fixture
def report():
    """One updraft Report collecting every graph compiled in the test (recompiles included)."""
    from updraft.report import Report, set_collector

    rep = Report()
    set_collector(rep)
    yield rep
    set_collector(None)
