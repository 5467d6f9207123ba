"""float64 elementwise ops, reductions and norms vs eager PyTorch in f64, run in the engine on the
fast CPU kernels (src/kernels/cpu/elementwise_f64.cpp, reduction_f64.cpp, norm_f64.cpp).

Sizes are above the partitioner's reference-kernel limit (REFERENCE_KERNEL_MAX_NUMEL), so an op
without a fast f64 kernel would be left to PyTorch and the in-engine check would fail.

Tolerances, per kind of op:
  * arithmetic, compares, selects, rounding, min/max/clamp: rtol 1e-12 (both sides compute the
    same IEEE operations; the margin covers summation order in the reductions, which PyTorch
    does in a cascade and the engine pairwise);
  * transcendental functions: rtol 1e-13 plus atol 1e-15. The engine calls the C library (< 1
    ulp), PyTorch SLEEF (1 ulp): a few ulp apart. The atol covers formulas that differ in
    form near zero (PyTorch's gelu is x/2 (1 + erf(x/sqrt 2)), which cancels for x << 0, the
    engine's 0.5 x erfc(-x/sqrt 2) does not; their difference there is ~eps * |x|, < 1e-15);
  * norms and softmax: rtol 1e-12, atol 1e-14 (outputs are O(1); a handful of roundings).
"""
import math

import pytest
import torch
import torch.nn.functional as F

import updraft

NAN, INF = float("nan"), float("inf")
EXACT = (1e-12, 0.0)
MATH = (1e-13, 1e-15)
NORM = (1e-12, 1e-14)

SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e300, -1e300, 1e10, -1e10, 709.0, -745.0,
           710.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.0, 0.25, -3.0, 20.0, -20.0, 0.3]


def _run(fn, *inputs):
    with torch.no_grad():
        ref = fn(*inputs)
        got = torch.compile(fn, backend="updraft", fullgraph=True)(*inputs)
    rep = updraft.last_report()
    return got, ref, rep


def check(fn, *inputs, tol=EXACT):
    got, ref, rep = _run(fn, *inputs)
    assert rep is not None and rep.num_partitions >= 1, str(rep)
    assert rep.num_fallback_compute == 0, str(rep)
    for g, e in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
        assert g.dtype == e.dtype and g.shape == e.shape
        if e.is_floating_point():
            assert torch.equal(torch.isnan(g), torch.isnan(e)), (g, e)
            assert torch.equal(torch.isposinf(g), torch.isposinf(e))
            assert torch.equal(torch.isneginf(g), torch.isneginf(e))
        torch.testing.assert_close(g, e, rtol=tol[0], atol=tol[1], equal_nan=True)


def special(n=2048):
    s = torch.tensor(SPECIAL, dtype=torch.float64)
    return s.repeat(n // len(SPECIAL) + 1)[:n]


EXACT_UNARY = {
    "neg": lambda x: -x, "abs": torch.abs, "relu": torch.relu, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "sign": torch.sign, "clamp": lambda x: torch.clamp(x, -0.5, 0.7), "hardtanh": F.hardtanh,
    "isnan": torch.isnan, "logical_not": torch.logical_not, "pow_2": lambda x: x ** 2,
    "pow_half": lambda x: x ** 0.5, "pow_neg1": lambda x: x ** -1.0, "add_scalar": lambda x: x + 1.0,
    "div_zero": lambda x: x / 0.0, "where_nan": lambda x: torch.where(x > 0, x, NAN),
    "masked_fill": lambda x: x.masked_fill(x < 0, -INF), "mul_inf": lambda x: x * INF,
}
MATH_UNARY = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log, "erf": torch.erf,
    "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "asinh": torch.asinh,
    "log1p": torch.log1p, "expm1": torch.expm1, "log2": torch.log2, "exp2": torch.exp2,
    "pow_3": lambda x: x ** 3, "pow_1_7": lambda x: x ** 1.7,
}


@pytest.mark.parametrize("name", sorted(EXACT_UNARY))
def test_unary_exact(name):
    x = torch.randn(37, 61, dtype=torch.float64) * 4
    check(EXACT_UNARY[name], x)
    check(EXACT_UNARY[name], special())


@pytest.mark.parametrize("name", sorted(MATH_UNARY))
def test_unary_math(name):
    x = torch.randn(37, 61, dtype=torch.float64) * 4
    check(MATH_UNARY[name], x, tol=MATH)
    # Huge arguments of sin/cos: both sides reduce exactly, but keep to |x| <= 1e10 to leave
    # SLEEF's documented range.
    check(MATH_UNARY[name], special(), tol=MATH)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "minimum": torch.minimum, "eq": torch.eq, "lt": torch.lt, "ge": torch.ge, "ne": torch.ne,
    "fmod": torch.fmod, "remainder": torch.remainder, "floor_divide": torch.floor_divide,
}


@pytest.mark.parametrize("name", sorted(BINARY) + ["pow", "atan2"])
def test_binary_grid_and_broadcast(name):
    fn = BINARY.get(name) or {"pow": torch.pow, "atan2": torch.atan2}[name]
    tol = MATH if name in ("pow", "atan2") else EXACT
    s = torch.tensor(SPECIAL, dtype=torch.float64)
    # Every pair of special values, tiled past the reference-kernel limit.
    a = s[:, None].repeat(2, 1).expand(54, 27).contiguous()
    b = s[None, :]
    if name in ("fmod", "remainder"):
        # Where a / b overflows (1e300 % 1e-310), eager's vector fmod gives NaN or 0 depending on
        # the neighbouring lanes; the engine gives the exact remainder (as test_edge_values.py
        # notes for f32). Left out.
        over = (a / b).isinf() & a.isfinite() & b.isfinite()
        a = torch.where(over, torch.full_like(a, NAN), a)
    check(fn, a, b)
    x = torch.randn(64, 48, dtype=torch.float64)
    y = torch.randn(48, dtype=torch.float64)
    check(fn, x, y, tol=tol)
    check(fn, x.t().contiguous().t(), torch.randn(64, 1, dtype=torch.float64), tol=tol)


REDUCTIONS = {
    "sum": lambda x: x.sum(-1), "sum_all": lambda x: x.sum(), "sum0": lambda x: x.sum(0),
    "mean": lambda x: x.mean(-1, keepdim=True), "mean0": lambda x: x.mean(0),
    "amax": lambda x: x.amax(-1), "amin0": lambda x: x.amin(0), "prod": lambda x: (x * 0.1 + 1).prod(-1),
    "var": lambda x: x.var(-1), "var0": lambda x: x.var(0, correction=0),
    "argmax": lambda x: x.argmax(-1), "argmin0": lambda x: x.argmin(0), "cumsum": lambda x: x.cumsum(-1),
    "cumsum0": lambda x: x.cumsum(0),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name):
    x = torch.randn(33, 257, dtype=torch.float64)
    check(REDUCTIONS[name], x)
    xs = x.clone()
    xs[3, 5] = NAN
    xs[4, 7] = INF
    xs[5, :] = -INF
    check(REDUCTIONS[name], xs)


def test_long_sum_matches_cascade():
    x = torch.full((1_000_003,), 0.1, dtype=torch.float64)
    check(lambda t: t.sum(), x)


NORMS = {
    "softmax": lambda x: torch.softmax(x, -1), "softmax0": lambda x: torch.softmax(x, 0),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],), eps=1e-12),
}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_norms(name):
    x = torch.randn(4, 33, 129, dtype=torch.float64) * 5
    check(NORMS[name], x, tol=NORM)
    xm = x.clone()
    xm[0, 0, :] = -INF  # all masked: NaN as eager
    xm[1, 2, 7] = -INF
    check(NORMS[name], xm, tol=NORM)


def test_norm_modules():
    ln = torch.nn.LayerNorm(129).double()
    rms = torch.nn.RMSNorm(129, eps=1e-6).double()
    bn = torch.nn.BatchNorm2d(8).double().eval()
    with torch.no_grad():
        for m in (ln, rms, bn):
            for p in m.parameters():
                p.uniform_(0.5, 1.5)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    # A large common offset: the mean rounds at ~100 * eps on either side, which (x - mean)
    # carries into the output as an absolute error of ~1e-13 (hence atol 1e-12 here).
    x = torch.randn(4, 33, 129, dtype=torch.float64) + 100
    check(ln, x, tol=(1e-12, 1e-12))
    check(rms, x, tol=NORM)
    check(bn, torch.randn(2, 8, 17, 19, dtype=torch.float64), tol=NORM)


_OURS = {"add", "sub", "mul", "div", "neg", "gelu", "tanh", "exp", "rsqrt", "sqrt", "where", "softmax",
         "log_softmax", "layer_norm", "rms_norm", "batch_norm", "sum", "mean", "amax", "var", "pow",
         "pow_scalar", "maximum", "minimum", "clamp", "eq", "ne", "lt", "gt", "le", "ge", "erf", "sigmoid",
         "relu", "silu", "cumsum", "argmax"}


class _Block(torch.nn.Module):
    """A pre-norm transformer block written out (nn.TransformerEncoderLayer's eval fast path
    is one fused aten op the engine does not lower)."""

    def __init__(self, d=64, heads=4, ff=256):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def test_f64_transformer_block_runs_in_engine():
    """A float64 transformer block: no elementwise / reduction / norm op is left to PyTorch for
    want of a fast f64 kernel (before, each was: "engine op X has no fast CPU kernel for f64")."""
    block = _Block().double().eval()
    x = torch.randn(2, 48, 64, dtype=torch.float64)
    # Kernels, not partitioning: without f64 linears in the engine the cost rule would leave
    # the one-op partitions between them to PyTorch.
    rep = updraft.explain(block, x, config=updraft.CompilerConfig(partition_cost=False))
    reasons = [r for rs in rep.reasons.values() for r in rs]
    bad = [r for r in reasons if "no fast CPU kernel" in r and r.split()[2] in _OURS]
    assert not bad, str(rep)
    for op in ("layer_norm", "softmax", "gelu", "add"):
        assert any(op in str(k) for k in rep.engine_ops), (op, str(rep))
    with torch.no_grad():
        got = torch.compile(block, backend="updraft")(x)
        want = block(x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
