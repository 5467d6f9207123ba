"""Inputs a compiled graph writes (a static KV cache's `index_copy_`, a buffer updated in place):
AOTAutograd turns the write into a new value it copies back after the call. Where that value is
an engine partition's scatter of the input and nothing else reads the input, the engine writes
it in place and returns the input itself, so the copy-back does nothing
(backend._write_inputs_in_place). Everything here is compared with eager, step by step."""
import pytest
import torch

import updraft
from updraft import CompilerConfig, get_backend

ENGINE = get_backend(CompilerConfig(inference="engine"))  # timing could hand a tiny graph to PyTorch


class Cache(torch.nn.Module):
    """A KV-cache-like buffer: one row written per call at `pos`, then read whole."""

    def __init__(self, read_old: bool = False, accumulate: bool = False, scatter: bool = False):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 8, 4))
        self.lin = torch.nn.Linear(4, 4)
        self.read_old, self.accumulate, self.scatter = read_old, accumulate, scatter

    def forward(self, x, pos):
        old = self.cache.sum() if self.read_old else 0.0
        if self.scatter:  # aten.scatter.src: the row `pos` of every head
            self.cache.scatter_(2, pos.view(1, 1, 1, 1).expand(1, 2, 1, 4), self.lin(x))
        elif self.accumulate:
            self.cache.index_put_((torch.zeros_like(pos), torch.zeros_like(pos), pos), self.lin(x)[0, 0, 0],
                                  accumulate=True)
        else:
            self.cache.index_copy_(2, pos, self.lin(x))
        return torch.softmax(self.cache, dim=2).sum(2) + old


def _steps(model, compiled, steps=5):
    torch.manual_seed(1)
    with torch.no_grad():
        for i in range(steps):
            x, pos = torch.randn(1, 2, 1, 4), torch.tensor([i % 8])
            want = model(x, pos)
            got = compiled(x, pos)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)  # f32 linear, softmax


def _pair(**kw):
    torch.manual_seed(0)
    model = Cache(**kw).eval()
    twin = Cache(**kw).eval()
    twin.load_state_dict(model.state_dict())
    return model, twin


@pytest.mark.parametrize("kw", [{}, dict(scatter=True)], ids=["index_copy_", "scatter_"])
def test_a_written_buffer_is_written_in_place(kw):
    eager, model = _pair(**kw)
    compiled = torch.compile(model, backend=ENGINE)
    _steps(eager, compiled)
    torch.testing.assert_close(model.cache, eager.cache, rtol=1e-5, atol=1e-6)
    rep = updraft.last_report()
    assert any("written in place by the engine" in why for g in rep.graphs for _, why in g.compiles), str(rep)
    assert [(g.input_writes, g.input_writes_in_place) for g in rep.graphs] == [(1, 1)]
    assert rep.coverage == 1.0


@pytest.mark.parametrize("kw", [dict(read_old=True), dict(accumulate=True)], ids=["old-value-read", "accumulate"])
def test_writes_that_must_copy_stay_correct(kw):
    """The old value read after the write (the input has another reader), or an accumulating
    write (a PyTorch rerun after an engine failure would add twice): a new tensor and the copy-back."""
    eager, model = _pair(**kw)
    compiled = torch.compile(model, backend=ENGINE)
    _steps(eager, compiled)
    torch.testing.assert_close(model.cache, eager.cache, rtol=1e-5, atol=1e-6)
    assert not any("written in place" in why for g in updraft.last_report().graphs for _, why in g.compiles)


def test_an_out_of_place_scatter_leaves_its_input_alone():
    """index_copy (not index_copy_) of a graph input: the input is not written, so it must not be
    written in place either."""
    def f(cache, x, pos):
        return cache.index_copy(2, pos, x * 2).sum(2)

    compiled = torch.compile(f, backend=ENGINE)
    cache = torch.randn(1, 2, 8, 4)
    before = cache.clone()
    x, pos = torch.randn(1, 2, 1, 4), torch.tensor([3])
    torch.testing.assert_close(compiled(cache, x, pos), f(before, x, pos))
    assert torch.equal(cache, before)
