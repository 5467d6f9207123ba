"""`as_strided` (and its copy / scatter forms) over values whose layout the engine chose
(partition.restride_storage_reads). An engine partition returns contiguous results where torch's
op may not (attention's [B,H,L,E] result is stored [B,L,H,E] by torch), and a training backward
receives the engine forward's saved results that way; `as_strided` names strides and a storage
offset, so without the restride it read other elements than eager, silently (wrong values of the
order of the values themselves). Tolerance f32: rtol 1e-5, atol 1e-5 x max|eager| (a linear and
an attention summed in other orders than ATen's, ~1e-6 relative).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import updraft
from updraft import partition


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


class _Attention(torch.nn.Module):
    """q = k = v from one linear, heads transposed in; `read` gets sdpa's result [B,H,L,E],
    traced with torch's [B,L,H,E] storage."""

    def __init__(self, read):
        super().__init__()
        self.lin, self.read = torch.nn.Linear(8, 32), read

    def forward(self, x):
        q = self.lin(x).view(x.shape[0], x.shape[1], 4, 8).transpose(1, 2)
        return self.read(F.scaled_dot_product_attention(q, q, q))


def _same_strides(o):
    return torch.as_strided(o, o.size(), o.stride()) + 1


def _through_views(o):
    # A view chain first (t starts 32 elements into o's storage), then a read of the root's storage
    # from another offset.
    t = o.transpose(2, 3)[:, :, :, 1:]
    return torch.as_strided(t, (2, 3, 5), (40, 1, 8), 34) * 3


def _copy_form(o):
    return torch.ops.aten.as_strided_copy(o, o.size(), o.stride()) - 1


def _scatter_form(o):
    return torch.as_strided_scatter(o, torch.arange(40.0).view(2, 4, 5), (2, 4, 5), (160, 8, 32), 3)


@pytest.mark.parametrize("read", [_same_strides, _through_views, _copy_form, _scatter_form])
def test_inference_reads_an_engine_result_in_its_traced_layout(read):
    torch.manual_seed(0)
    model, x = _Attention(read).eval(), torch.randn(2, 5, 8)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="updraft", options={"inference": "engine", "cache_dir": ""})(x)
    _close(got, want)
    report = updraft.last_report()
    assert any("sdpa" in op or "attention" in op for p in report.partitions for op, _ in p.ops), \
        "the attention must run in the engine for this test to mean anything"


@pytest.mark.parametrize("dynamic", [False, True])
def test_outputs_keep_eager_strides(dynamic):
    # sdpa's result transposed back is contiguous in eager ([B,L,H,E] storage) and a view of the
    # engine's contiguous [B,H,L,E] result in PyTorch: the user's .view() raised before.
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 32)

    def f(x):
        q = lin(x).view(x.shape[0], x.shape[1], 4, 8).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, q, q)
        return o.transpose(1, 2), o, o.transpose(2, 3)[..., 1:]

    fast = torch.compile(f, backend="updraft", dynamic=dynamic, options={"inference": "engine", "cache_dir": ""})
    with torch.no_grad():
        for length in (5, 7) if dynamic else (5,):
            x = torch.randn(2, length, 8)
            got, want = fast(x), f(x)
            for g, w in zip(got, want):
                assert g.stride() == w.stride()
                _close(g, w)
            assert got[0].view(2, length, 32).shape == (2, length, 32)
    assert any(kind == "output layouts" for g in updraft.last_report().graphs for kind, _ in g.compiles)


@torch.library.custom_op("updraft_test::flat_first_rows", mutates_args=())
def _flat_first_rows(x: torch.Tensor) -> torch.Tensor:
    # A kernel of the user's that takes its input's memory as eager lays it out (a C++
    # extension reading data_ptr would do the same): .view fails on another layout.
    return x.view(-1)[: x.shape[-1]].clone()


@_flat_first_rows.register_fake
def _(x):
    return x.new_empty(x.shape[-1])


def test_a_custom_op_gets_its_inputs_in_their_traced_layout():
    torch.manual_seed(0)
    model, x = _Attention(lambda o: _flat_first_rows(o.transpose(1, 2)) * 2).eval(), torch.randn(2, 5, 8)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="updraft", options={"inference": "engine", "cache_dir": ""})(x)
    _close(got, want)


def test_dynamic_shapes_rebuild_the_traced_dimension_order():
    torch.manual_seed(0)
    model = _Attention(_same_strides).eval()
    fast = torch.compile(model, backend="updraft", dynamic=True, options={"inference": "engine", "cache_dir": ""})
    with torch.no_grad():
        for length in (5, 7, 11):
            x = torch.randn(2, length, 8)
            _close(fast(x), model(x))


def test_a_user_input_is_read_by_its_own_storage():
    # Eager reads a user's tensor by its real storage: a transposed input is not restrided.
    def f(x):
        return torch.as_strided(x.sin(), (3, 4), (1, 3)) + torch.as_strided(x, (3, 4), (4, 1))

    x = torch.randn(4, 3).t()
    _close(torch.compile(f, backend="updraft", options={"cache_dir": ""})(x), f(x))


class _SavesAttention(torch.autograd.Function):
    """Saves sdpa's result for a backward that reads it with `as_strided` by its traced strides."""

    @staticmethod
    def forward(ctx, q):
        o = F.scaled_dot_product_attention(q, q, q)
        ctx.save_for_backward(o)
        return o * 2

    @staticmethod
    def backward(ctx, g):
        (o,) = ctx.saved_tensors
        return g * torch.as_strided(o, o.size(), o.stride())


class _Trained(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 32)

    def forward(self, x):
        return _SavesAttention.apply(self.lin(x).view(2, 5, 4, 8).transpose(1, 2)).sum()


@pytest.mark.parametrize("backward_in", ["engine", "pytorch"])
def test_a_backward_reads_a_saved_engine_result_in_its_traced_layout(backward_in, monkeypatch):
    torch.manual_seed(0)
    model, x = _Trained(), torch.randn(2, 5, 8)

    def step(fn):
        model.zero_grad()
        fn(x).backward()
        return model.lin.weight.grad.clone(), model.lin.bias.grad.clone()

    want = step(model)
    if backward_in == "pytorch":  # the backward's compile fails: it runs as its graph, in PyTorch
        real = updraft.backend.compile_inference

        def fail_backward(gm, config, report, names=None):
            if report.kind == "training backward":
                raise RuntimeError("backward left to PyTorch by the test")
            return real(gm, config, report, names)
        monkeypatch.setattr(updraft.backend, "compile_inference", fail_backward)
    got = step(torch.compile(model, backend="updraft", options={"cache_dir": ""}))
    for g, w in zip(got, want):
        _close(g, w)


def test_roots_already_in_their_traced_layout_cost_nothing():
    # A contiguous engine result read by as_strided: the check finds its layout and returns it.
    x = torch.randn(3, 4)
    assert partition._in_traced_layout(x, (4, 1), 0, 12) is x
    y = partition._in_traced_layout(x.t().contiguous().t(), (4, 1), 0, 12)
    assert y.stride() == (4, 1) and torch.equal(y, x)
    z = partition._in_traced_order(x.t().contiguous().t(), (0, 1))
    assert z.stride() == (4, 1) and torch.equal(z, x)
