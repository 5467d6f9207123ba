"""PyTorch's OpInfo database through torch.compile(backend="updraft"), compared with eager.

Default lane (`test_opinfo_first_sample`): one test per OpInfo entry that supports float32 on
the CPU, running its first float32 sample. Every op is covered once; the remaining samples and
the other dtypes are the full sweep (`-m opinfo_full`, `test_opinfo_full`), which is slow (about
19k float32 samples) and not in the default lane.

A test fails when the sample ends WRONG (compiled result differs from eager beyond the
per-dtype tolerance of tools/opinfo_sweep.py) or CRASH (updraft raised where eager did not).
Falling back to PyTorch is a pass: it is correct, and docs/COVERAGE.md counts it. Samples on
which eager raises, Dynamo cannot trace with fullgraph=True, or which fail the same way
without the engine (a PyTorch issue) are not updraft's to pass or fail; they pass and the
outcome is reported by the sweep.

The harness lives in tools/opinfo_sweep.py (run it directly for the coverage page).
"""
from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import opinfo_sweep as sweep  # noqa: E402

_OPS = [op for op in sweep.op_db() if torch.float32 in op.supported_dtypes("cpu")]
_FAILING = ("WRONG", "CRASH")


def _check(results: list) -> None:
    bad = [f"{r.op} {r.dtype} sample {r.index}: {r.outcome}: {r.detail}" for r in results
           if r.outcome in _FAILING]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", _OPS, ids=sweep.full_name)
def test_opinfo_first_sample(op):
    with sweep.quiet():
        results = sweep.run_op(op, torch.float32, max_samples=1)
    assert results, f"{sweep.full_name(op)} has no float32 sample"
    _check(results)


def test_classification_engine_and_wrong():
    """The harness itself: an op the engine runs is ENGINE; a wrong answer is caught."""
    add = next(op for op in _OPS if op.name == "add" and not op.variant_test_name)
    from torch.testing._internal.opinfo.core import SampleInput

    sample = SampleInput(torch.randn(3, 4), args=(torch.randn(3, 4),))
    with sweep.quiet():
        r = sweep.run_sample(add, sample, torch.float32, 0)
    assert r.outcome == "ENGINE", r
    assert sweep.compare(torch.ones(3), torch.ones(3) + 1e-3) is not None
    assert sweep.compare(torch.ones(3), torch.ones(3) + 1e-7) is None
    assert sweep.compare(torch.tensor([1, 2]), torch.tensor([1, 3])) is not None


# Only the (op, dtype) pairs OpInfo says the CPU supports: nothing to skip at run time.
_FULL_CASES = [
    pytest.param(op, dtype, id=f"{sweep.full_name(op)}-{dtype}")
    for op in _OPS
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bool)
    if dtype in op.supported_dtypes("cpu")
]


@pytest.mark.opinfo_full
@pytest.mark.parametrize("op,dtype", _FULL_CASES)
def test_opinfo_full(op, dtype):
    with sweep.quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = sweep.run_op(op, dtype, max_samples=None)
    _check(results)
