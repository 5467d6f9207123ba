"""Ops met in real models that used to fall back (issue 13, part 5), each vs eager PyTorch on
generated cases with edge values (NaN, Inf, zeros, empty dims, ties), through
torch.compile(backend="updraft"); every case also asserts that no compute op ran in PyTorch.

Tolerances: exact for integer results, data movement, counts and selections; the norms sum
in another order than ATen (RED).
"""
import itertools
import math

import pytest
import torch

import updraft

EXACT = (0.0, 0.0)
RED = (1e-5, 1e-5)


def _edge(*shape, dtype=torch.float32):
    """Random values with NaN, +-Inf and zeros sprinkled in."""
    x = torch.randn(*shape, dtype=dtype)
    flat = x.view(-1)
    if flat.numel() >= 8:
        flat[1] = float("nan")
        flat[3] = float("inf")
        flat[5] = -float("inf")
        flat[6] = 0.0
    return x


def check(fn, inputs, tol=EXACT, engine_only=True):
    with torch.no_grad():
        ref = fn(*inputs)
        compiled = torch.compile(fn, backend="updraft", fullgraph=True)
        got = compiled(*inputs)
        got2 = compiled(*inputs)
    for g in (got, got2):
        refs = ref if isinstance(ref, (tuple, list)) else [ref]
        gots = g if isinstance(g, (tuple, list)) else [g]
        for a, b in zip(gots, refs):
            assert a.dtype == b.dtype, (a.dtype, b.dtype)
            assert a.shape == b.shape, (a.shape, b.shape)
            torch.testing.assert_close(a, b, rtol=tol[0], atol=tol[1], equal_nan=True)
    rep = updraft.last_report()
    if engine_only:
        assert rep.num_partitions >= 1 and rep.num_fallback_compute == 0, str(rep)
    return rep


# -- linalg_vector_norm
NORM_ORDS = [2, 1, float("inf"), -float("inf"), 0, 3, 0.5, -1, -2.5]


@pytest.mark.parametrize("ord_", NORM_ORDS)
@pytest.mark.parametrize("dim,keepdim", [(None, False), ((-1,), True), ((0, 2), False), (1, True), ([], False)])
def test_vector_norm(ord_, dim, keepdim):
    x = _edge(3, 4, 5)
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=dim, keepdim=keepdim), [x], RED)
    y = torch.randn(3, 4, 5)
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=dim, keepdim=keepdim), [y], RED)


@pytest.mark.parametrize("ord_", [2, 1, 0, 3])
def test_vector_norm_empty_and_zero_rows(ord_):
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=1), [torch.randn(3, 0)], RED)
    z = torch.zeros(4, 6)
    z[0, 2] = 1.0
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=-1, keepdim=True), [z], RED)


def test_vector_norm_dtype_arg_and_f64():
    x = torch.randn(4, 7)
    check(lambda t: torch.linalg.vector_norm(t, 2, dim=1, dtype=torch.float64), [x], RED)
    check(lambda t: torch.linalg.vector_norm(t, 3, dim=0), [x.double()], RED)


def test_vector_norm_in_global_response_norm():
    # ConvNeXt-V2's GRN: Gx = ||x||_2 over (H, W), normalised by its channel mean.
    def grn(x):
        gx = torch.linalg.vector_norm(x, 2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return x * nx + x
    check(grn, [torch.randn(2, 5, 5, 8)], RED)


# -- copy
@pytest.mark.parametrize("dst,src", [
    ((4, 6), torch.randn(6)),
    ((4, 6), torch.randn(4, 1)),
    ((4, 6), torch.randn(4, 6).double()),
    ((2, 3, 4), torch.randint(-5, 5, (3, 4))),
    ((5,), torch.tensor(2.5)),
    ((0, 3), torch.randn(3)),
])
def test_copy(dst, src):
    x = torch.randn(*dst)
    check(lambda a, b: torch.ops.aten.copy(a, b) * 1, [x, src])
    xi = torch.zeros(*dst, dtype=torch.int64)
    check(lambda a, b: torch.ops.aten.copy(a, b) + 1, [xi, src])


def test_copy_inplace_buffer_update():
    def f(buf, x):
        buf = buf.clone()
        buf.copy_(x * 2)  # functionalised into aten.copy
        return buf + 1
    check(f, [torch.zeros(3, 4), torch.randn(4)])


# -- bitwise_not
@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64])
def test_bitwise_not(dtype):
    if dtype == torch.bool:
        x = torch.rand(5, 7) > 0.5
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(-100, 100, (5, 7), dtype=dtype)
        x.view(-1)[:4] = torch.tensor([info.min, info.max, 0, -1], dtype=dtype)
    check(lambda t: torch.bitwise_not(t), [x])
    check(lambda t: ~(t > 0) if dtype != torch.bool else ~t, [x])


def test_bitwise_not_of_a_mask():
    check(lambda t: torch.where(~torch.isnan(t), t, torch.zeros_like(t)), [_edge(4, 4)])


# -- cumsum on integer dtypes
@pytest.mark.parametrize("in_dtype", [torch.int32, torch.int64, torch.bool, torch.float32])
@pytest.mark.parametrize("out_dtype", [None, torch.int32, torch.int64])
def test_cumsum_int(in_dtype, out_dtype):
    if in_dtype == torch.bool:
        x = torch.rand(4, 9) > 0.4
    elif in_dtype == torch.float32:
        x = torch.randn(4, 9) * 10
    else:
        x = torch.randint(-50, 50, (4, 9), dtype=in_dtype)
    for dim in (0, 1, -1):
        check(lambda t: torch.cumsum(t, dim, dtype=out_dtype), [x])


def test_cumsum_int32_wraps_as_eager():
    x = torch.full((6,), 2**30, dtype=torch.int32)
    check(lambda t: torch.cumsum(t, 0, dtype=torch.int32), [x])
    check(lambda t: torch.cumsum(t, 0), [x])


# -- histc
@pytest.mark.parametrize("bins,lo,hi", [(5, -1.0, 1.0), (4, 0.0, 3.0), (7, -2.5, 0.1), (1, -1.0, 1.0), (10, 0.0, 0.3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc(bins, lo, hi, dtype):
    x = torch.randn(200, dtype=dtype) * 1.5
    # exact edges, the max itself (last bin), values just outside, NaN and infinities
    edges = torch.linspace(lo, hi, bins + 1, dtype=dtype)
    special = torch.cat([edges, torch.tensor([lo - 1e-3, hi + 1e-3, float("nan"), float("inf"), -float("inf")],
                                             dtype=dtype)])
    x = torch.cat([x, special, special])
    check(lambda t: torch.histc(t, bins, lo, hi), [x])
    check(lambda t: torch.histc(t.view(7, -1), bins, lo, hi), [x[:7 * (x.numel() // 7)]])


def test_histc_of_expert_ids():
    # transformers' grouped-mm MoE: counts per expert from sorted ids as floats.
    ids = torch.randint(0, 6, (40,)).sort().values.float()
    check(lambda t: torch.histc(t, bins=6, min=0, max=5), [ids])
    check(lambda t: torch.histc(t, 6, 0, 5), [torch.empty(0)])


def test_histc_range_from_data_stays_in_pytorch():
    x = torch.randn(30)
    rep = check(lambda t: torch.histc(t, 4), [x], engine_only=False)
    assert rep.num_fallback_compute >= 1


# -- empty / empty_permuted
def test_empty_like_then_written():
    def f(perm):
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        return inv
    check(f, [torch.randperm(17)])


def test_empty_permuted_then_filled():
    def f(x):
        e = torch.empty_permuted((4, 6), (1, 0))
        e.copy_(x)
        return e + 1
    check(f, [torch.randn(4, 6)])


# -- topk among equal values (docs/decisions.md, "topk among equal values")
def _all_topks(n, largest_sorted):
    """One graph holding topk for every k in 1..n and each (largest, sorted) pair."""
    def f(x):
        return [t for k in range(1, n + 1) for lg, so in largest_sorted
                for t in torch.topk(x, k, dim=-1, largest=lg, sorted=so)]
    return f


FLAGS = [(True, True), (False, True), (True, False), (False, False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 17, 33, 64, 65])
def test_topk_ties_every_k(dtype, n):
    g = torch.Generator().manual_seed(n)
    for hi in (2, 4):
        x = torch.randint(0, hi, (6, n), generator=g).to(dtype)  # heavy ties
        if dtype.is_floating_point and n > 3:
            x[0, ::3] = float("nan")
            x[1, 1] = float("inf")
            x[2, :] = 0.0
        check(_all_topks(n, FLAGS), [x])


@pytest.mark.parametrize("n,ks", [(128, [1, 2, 3]), (300, [1, 2, 4, 5, 6, 299]), (1000, [1, 7, 15, 16, 500])])
def test_topk_ties_partial_sort_branch(n, ks):
    # k * 64 <= n: ATen takes std::partial_sort instead of nth_element.
    x = torch.randint(0, 3, (4, n)).float()
    x[0, 5] = float("nan")
    def f(t):
        return [r for k in ks for lg, so in FLAGS for r in torch.topk(t, k, dim=1, largest=lg, sorted=so)]
    check(f, [x])


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_topk_ties_along_dims(dim):
    x = torch.randint(0, 3, (5, 6, 7)).float()
    def f(t):
        n = t.shape[dim]
        return [r for k in range(1, n + 1) for r in torch.topk(t, k, dim=dim)]
    check(f, [x])
    check(lambda t: torch.topk(t.transpose(0, 2), 2, dim=dim), [x])


def test_topk_moe_router():
    # softmax -> top-2 with probabilities that tie exactly (duplicate router rows)
    logits = torch.randn(16, 1).expand(16, 8).contiguous()
    logits[:, 3] += 1.0
    def f(t):
        p = torch.softmax(t, dim=-1)
        w, i = torch.topk(p, 2, dim=-1)
        return w / w.sum(-1, keepdim=True), i
    check(f, [logits], RED)
