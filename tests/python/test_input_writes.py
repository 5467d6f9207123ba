"""Inputs a compiled graph writes (a static KV cache's `index_copy_`, a buffer updated in place):
AOTAutograd turns the write into a new value it copies back after the call. Where that value is
an engine partition's scatter of the input and nothing else reads the input, or a pointwise
update of it (an optimizer step), the engine writes it in place and returns the input itself,
so the copy-back does nothing (backend._write_inputs_in_place). Everything here is compared
with eager, step by step."""
import copy

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


# -- pointwise writes: the new value computed element by element from the old one (an optimizer
# step's parameters and moments). EnginePartition.write_input_in_place's pointwise rule.

def _decay(buf, x):
    buf.mul_(0.9).add_(x, alpha=0.1)  # read and written element by element
    return buf.sum()


def _decay_from_matmul(buf, x):
    buf.copy_(buf @ x)  # a matmul reads every element of buf for each one it writes
    return buf.sum()


def _decay_transposed(buf, x):
    buf.add_(buf.t() * 0.5)  # element (i, j) is written from (j, i)
    return buf.sum()


def _decay_old_value_kept(buf, x):
    old = buf * 2  # read after the write in the engine's order? It is another reader: copy
    buf.mul_(0.9).add_(x)
    return old


def _decay_broadcast(buf, x):
    buf.add_(buf.sum(0, keepdim=True) * x)  # a reduction in the new value's cone
    return buf.sum()


def _run_writes(fn, steps=4):
    torch.manual_seed(0)
    buf, x = torch.randn(6, 6), torch.randn(6, 6)
    ref = buf.clone()
    compiled = torch.compile(fn, backend=ENGINE)
    with torch.no_grad():
        for _ in range(steps):
            torch.testing.assert_close(compiled(buf, x), fn(ref, x), rtol=1e-5, atol=1e-5)  # f32, 36-element sums
    # f32; the matmul case feeds each step's rounding into the next (values grow ~6x a step)
    torch.testing.assert_close(buf, ref, rtol=1e-4, atol=1e-5)
    (g,) = updraft.last_report().graphs
    return g


def test_a_pointwise_update_is_written_in_place():
    g = _run_writes(_decay)
    assert (g.input_writes, g.input_writes_in_place) == (1, 1), str(updraft.last_report())


@pytest.mark.parametrize("fn", [_decay_from_matmul, _decay_transposed, _decay_old_value_kept, _decay_broadcast],
                         ids=["matmul", "transposed", "old-value-read", "reduction"])
def test_updates_the_pointwise_rule_refuses_are_copied_back(fn):
    """Each of these would read an element of the input after the step writing it overwrote it
    (or fuse it into a kernel that might): the engine writes a new tensor, AOTAutograd copies it
    back, and the values stay eager's."""
    g = _run_writes(fn)
    assert (g.input_writes, g.input_writes_in_place) == (1, 0), str(updraft.last_report())


def _mlp_with_grads(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: torch.optim.Adam(ps, lr=1e-2),
    lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.RMSprop(ps, lr=1e-2),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),  # aten._foreach_* ops: decomposed
    lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=True),
], ids=["adamw", "adam", "sgd-nesterov", "rmsprop", "adamw-foreach", "sgd-foreach"])
def test_a_compiled_optimizer_step_updates_every_tensor_in_place(make):
    """torch.compile(opt.step): every parameter and state tensor the step writes is written in
    place by the engine (no new tensor, no copy-back), and after 6 steps parameters and state
    equal eager's (f32: one rounding per fma against torch's two, <= 1e-5 relative over 6 steps)."""
    model, ref = _mlp_with_grads(), _mlp_with_grads()
    opt, ref_opt = make(list(model.parameters())), make(list(ref.parameters()))
    step = torch.compile(opt.step, backend=ENGINE)
    ptrs = [p.data_ptr() for p in model.parameters()]
    for _ in range(6):
        step()
        ref_opt.step()
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        for k, v in ref_opt.state[q].items():
            torch.testing.assert_close(opt.state[p][k], v, rtol=1e-5, atol=1e-6)
    (g,) = updraft.last_report().graphs
    assert g.input_writes > 0 and g.input_writes_in_place == g.input_writes, str(updraft.last_report())
    assert g.fallback_compute == 0, str(updraft.last_report())


def test_an_engine_error_after_a_pointwise_write_raises_and_then_runs_in_pytorch():
    """A call that fails in the engine after writing an input computed from its old value cannot
    be run again in PyTorch (the input may be written already): it raises, naming why, and the
    partition runs in PyTorch from the next call on, with eager's values."""
    from updraft import _C, profiler

    torch.manual_seed(0)
    buf, x = torch.randn(6, 6), torch.randn(6, 6)
    compiled = torch.compile(_decay, backend=ENGINE)
    with torch.no_grad():
        compiled(buf, x)
        (report,) = updraft.last_report().graphs[0].partitions
        part = next(p for p in profiler._partitions if p.report is report)
        st = part._state

        class Failing:  # the bound call: writes its outputs, then the engine fails
            def __init__(self, real):
                self.real = real

            def run(self, ptrs, outs, strided):
                self.real.run(ptrs, outs, strided)
                raise _C.UpdraftError("[test] injected after the writes")

        assert st.calls, "the call took the bound fast path"
        st.calls = {k: (Failing(c), meta) for k, (c, meta) in st.calls.items()}
        with pytest.raises(RuntimeError, match="cannot run the call again"):
            compiled(buf, x)
        ref = buf.clone()
        torch.testing.assert_close(compiled(buf, x), _decay(ref, x))
        torch.testing.assert_close(buf, ref)
    assert isinstance(part._state, str) and "injected" in part._state


def test_a_profiled_optimizer_step_writes_in_place_on_the_observed_path():
    """updraft.profile runs each partition through the general (observed) path: the step still
    writes its inputs in place there, and the values stay eager's."""
    model, ref = _mlp_with_grads(), _mlp_with_grads()
    opt = torch.optim.AdamW(list(model.parameters()), lr=1e-2)
    ref_opt = torch.optim.AdamW(list(ref.parameters()), lr=1e-2)
    step = torch.compile(opt.step, backend=ENGINE)
    updraft.profile(step, runs=3, warmup=1)
    for _ in range(4):
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # as the compiled-step test above


def test_clipping_and_a_foreach_step_compiled_together_follow_eager():
    """clip_grad_norm_(foreach=True) traces to _foreach_norm, which no base overload takes as
    the foreach form passes it (it stays whole and runs in PyTorch), then a foreach AdamW step
    scaled by the clip coefficient: the values stay eager's."""
    model, ref = _mlp_with_grads(), _mlp_with_grads()
    opt = torch.optim.AdamW(list(model.parameters()), lr=1e-2, foreach=True)
    ref_opt = torch.optim.AdamW(list(ref.parameters()), lr=1e-2, foreach=True)

    def clipped_step(params, o):
        torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
        o.step()

    step = torch.compile(clipped_step, backend=ENGINE)
    for _ in range(3):
        step(list(model.parameters()), opt)
        clipped_step(list(ref.parameters()), ref_opt)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # as the compiled-step test above


def test_a_step_over_channels_last_weights_copies_their_writes_back():
    """A channels-last conv weight (and its AdamW moments, made like it) is not contiguous: the
    engine writes outputs contiguous, so such an input is not written in place but through a
    new tensor and AOTAutograd's copy-back. Written in place, its values were scrambled."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3))
    ref = ref.to(memory_format=torch.channels_last)
    model = copy.deepcopy(ref)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend=ENGINE)
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    for _ in range(4):
        for m, o, s in ((ref, ref_opt, ref_opt.step), (model, opt, step)):
            o.zero_grad(set_to_none=True)
            m(x).pow(2).mean().backward()
            s()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # as the compiled-step test above
