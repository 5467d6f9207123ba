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
from test_ops import ELEM, EXACT, RED, check_case, ints, pos, r


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
    # reductions with indices
    "max_dim": (lambda x: torch.max(x, 1), lambda: (r(4, 6, 5),), EXACT),
    "min_dim_keepdim": (lambda x: torch.min(x, -1, keepdim=True), lambda: (r(4, 6),), EXACT),
    "max_dim_ties_nan": (lambda x: x.max(0),
                         lambda: (torch.tensor([[1.0, float("nan"), 2.0], [1.0, 3.0, float("nan")],
                                                [0.5, float("nan"), 2.0]]),), EXACT),
    "max_dim_int": (lambda i: i.max(1).indices, lambda: (ints(4, 6, hi=3),), EXACT),
    "max_dim_0d": (lambda x: torch.max(x, 0), lambda: (torch.tensor(2.5),), EXACT),
    # sort and topk (values and indices; distinct values, as torch's unstable order may differ on ties)
    "sort": (lambda x: torch.sort(x, 1), lambda: (r(4, 7, 3),), EXACT),
    "sort_descending_stable": (lambda x: torch.sort(x, dim=0, descending=True, stable=True),
                               lambda: (torch.tensor([[1.0, 2.0], [3.0, 2.0], [1.0, float("nan")]]),), EXACT),
    "argsort": (lambda x: torch.argsort(x, -1), lambda: (r(5, 6),), EXACT),
    # topk: the values run in the engine (ties included); the indices stay in PyTorch (below)
    "topk": (lambda x: torch.topk(x, 3, 1).values, lambda: (r(4, 7, 3),), EXACT),
    "topk_smallest": (lambda x: torch.topk(x, 2, largest=False).values, lambda: (r(5, 6),), EXACT),
    "topk_0d": (lambda x: torch.topk(x, 1).values, lambda: (torch.tensor(1.5),), EXACT),
    "topk_int_ties": (lambda i: torch.topk(i, 4, 1).values, lambda: (ints(5, 9, hi=3),), EXACT),
    # layer norm with its statistics (mean, rstd) used
    "native_layer_norm_stats": (lambda x, w, b: torch.native_layer_norm(x, (3, 8), w, b, 1e-5),
                                lambda: (r(2, 3, 8), r(3, 8), r(3, 8)), RED),
    "native_layer_norm_rstd_only": (lambda x: torch.native_layer_norm(x, (8,), None, None, 0.5)[2],
                                    lambda: (r(4, 8) * 3 + 1,), RED),
    # pooling with divisor_override (sum / divisor), padded, ceil_mode and unbatched
    "avg_pool2d_divisor": (lambda x: F.avg_pool2d(x, 3, 1, 1, True, False, 2), lambda: (r(1, 3, 9, 9),), RED),
    "avg_pool2d_divisor_pad": (lambda x: F.avg_pool2d(x, (4, 2), (2, 3), 1, True, True, 5),
                               lambda: (r(2, 2, 9, 8),), RED),
    "avg_pool2d_unbatched": (lambda x: F.avg_pool2d(x, 2), lambda: (r(3, 6, 7),), RED),
    # flip, diagonal, as_strided and the copies built on them
    "flip": (lambda x: torch.flip(x, (0, 2)), lambda: (r(3, 4, 5),), EXACT),
    "flip_noncontiguous": (lambda x: torch.flip(x.transpose(0, 1), (1,)) * 2, lambda: (r(3, 4),), EXACT),
    "flip_empty": (lambda x: torch.flip(x, (0,)) + 1, lambda: (r(5, 0, 3),), EXACT),
    "fliplr": (torch.fliplr, lambda: (r(3, 4),), EXACT),
    "diagonal": (lambda x: torch.diagonal(x) + 0, lambda: (r(5, 4),), EXACT),
    "diagonal_offset_dims": (lambda x: torch.diagonal(x, -1, 2, 0) * 2, lambda: (r(4, 3, 5),), EXACT),
    "diagonal_past_the_end": (lambda x: torch.diagonal(x, 7) + 1, lambda: (r(3, 4),), EXACT),
    "diag": (torch.diag, lambda: (r(4, 6),), EXACT),
    "trace": (torch.trace, lambda: (r(5, 5),), RED),
    "as_strided": (lambda x: torch.as_strided(x + 1, (3, 2), (1, 2), 1), lambda: (r(3, 3),), EXACT),
    "as_strided_input": (lambda x: torch.as_strided(x, (2, 2), (1, 2)), lambda: (r(10),), EXACT),
    "repeat": (lambda x: x.repeat(2, 1, 3), lambda: (r(3, 4),), EXACT),
    "repeat_empty": (lambda x: x.repeat(0, 2) + 1, lambda: (r(3, 4),), EXACT),
    "slice_scatter": (lambda x, y: torch.slice_scatter(x, y, 1, 2, 5), lambda: (r(3, 7), r(3, 3)), EXACT),
    "slice_scatter_tail": (lambda x, y: torch.slice_scatter(x, y, 0, -2), lambda: (r(5, 2), r(2, 2)), EXACT),
    # Strided: the gradient of a patch merge's x[:, 0::2]; a tail that is not a whole step.
    "slice_scatter_step2": (lambda x, y: torch.slice_scatter(x, y, 1, 1, None, 2), lambda: (r(2, 8, 3), r(2, 4, 3)), EXACT),
    "slice_scatter_step3_tail": (lambda x, y: torch.slice_scatter(x, y, 0, 2, 9, 3), lambda: (r(10, 4), r(3, 4)), EXACT),
    "slice_scatter_step_one_elem": (lambda x, y: torch.slice_scatter(x, y, -1, 4, None, 5), lambda: (r(3, 6), r(3, 1)), EXACT),
    # an empty result goes through a contiguous output buffer whatever its strides
    "prod_empty_bool": (lambda b: b.prod(1), lambda: (torch.zeros(0, 3, dtype=torch.bool),), EXACT),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name):
    check_case(*CASES[name])


def test_topk_indices_run_in_engine_and_match_eager():
    """torch's topk orders equal values' indices its own way (ATen's partial sort); the engine's
    topk runs the same selection (docs/decisions.md), so indices among ties match eager's and
    the node stays in the engine (heavier tie cases: test_ops_missing.py)."""
    x = torch.randint(0, 3, (5, 9))
    with torch.no_grad():
        got = torch.compile(lambda t: torch.topk(t, 4, 1), backend="updraft", fullgraph=True)(x)
    want = torch.topk(x, 4, 1)
    assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)
    rep = updraft.last_report()
    assert rep.num_fallback_compute == 0, str(rep)
