"""The cost rule for partitions: does an engine partition pay for the boundary around it?

What it does: for each partition the partitioner proposes, estimates per call the time the
engine saves over PyTorch running the same nodes (PyTorch's per-op dispatch, the memory
passes that fusion removes, the per-call weight reorder of a PyTorch convolution and widening of
an int4 weight) and the
time the partition's boundary costs (one call into the engine, an output tensor per result,
a copy of every input PyTorch hands over non-contiguous). A partition whose estimate does not
pay stays in PyTorch, and `explain` shows both figures; so cutting a graph into engine pieces
between PyTorch islands never makes it slower than leaving it to PyTorch.

What it does not do: time anything at compile time (the constants below were measured once,
`benchmarks/partition_cost.py`, figures in docs/BENCHMARKS.md), merge partitions across a
PyTorch island (the island's op cannot run in the engine, and the partitioner's partitions are
already maximal), judge kernel speed (a node whose kernel would be a slow reference loop never
reaches a partition: support.py leaves it to PyTorch), or revisit a partition once built.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import torch
from torch import fx

from . import quantize  # noqa: F401  (defines torch.ops.updraft.linear_int4)
from .lowerer import numel_hint
from .lowering import is_compute, meta

aten = torch.ops.aten

# Measured by benchmarks/partition_cost.py (median of interleaved runs, 1 thread; see
# docs/BENCHMARKS.md "Partition cost rule"). Microseconds per call.
EAGER_OP_US = 6.5      # one aten op run by the fallback GraphModule: Python line + dispatch
CALL_US = 6.5          # one engine partition: forward(), fast-path lookup, plan run
OUTPUT_US = 0.8        # per partition output: torch.empty and its pointer
BYTES_PER_US = 5400.0  # one core's copy bandwidth: copies, fused intermediates, reorders

_CONVOLUTIONS = {aten.convolution.default, aten._convolution.default}
# updraft.quantize's int4 matmul: PyTorch has none for the engine's layout, so its eager form
# widens the weight on every call, two f32 values per stored byte, written and then read by the
# matmul; the engine reads the stored bytes.
_INT4_MATMUL = torch.ops.updraft.linear_int4.default
_INT4_WIDENED_BYTES_PER_BYTE = 2 * 2 * 4


@dataclasses.dataclass
class Estimate:
    saves_us: float
    costs_us: float
    compute_ops: int

    @property
    def pays(self) -> bool:
        return self.saves_us > self.costs_us

    def why(self) -> str:
        return (f"saves ~{self.saves_us:.1f} us, costs ~{self.costs_us:.1f} us per call "
                f"({self.compute_ops} compute op(s) against one engine call and its inputs/outputs)")


def _bytes(val: object) -> float:
    """Bytes of the tensors in `val` at their sizes' hints (inf when a size has none)."""
    vals = val if isinstance(val, (list, tuple)) else [val]
    return sum(numel_hint(v) * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def _pointwise(n: fx.Node) -> bool:
    return n.op == "call_function" and torch.Tag.pointwise in getattr(n.target, "tags", ())


def _contiguous(val: object) -> bool:
    if not isinstance(val, torch.Tensor):
        return True
    try:
        return bool(val.is_contiguous())
    except Exception:  # a data-dependent stride: assume the copy
        return False


def estimate(nodes: Iterable[fx.Node], frozen: set) -> Estimate:
    """The estimate for one partition (`nodes`); `frozen` holds the names of placeholders that
    become engine constants (frozen parameters), which cross no boundary per call."""
    part = set(nodes)
    compute = [n for n in part if is_compute(n)]
    saves = len(compute) * EAGER_OP_US
    for n in compute:
        # An intermediate produced and consumed by pointwise ops inside the partition stays in
        # registers once fused: PyTorch writes it and reads it back.
        if _pointwise(n) and n.users and all(u in part and _pointwise(u) for u in n.users):
            saves += 2 * _bytes(meta(n)) / BYTES_PER_US
        # PyTorch's CPU convolution reorders its weight into oneDNN's layout on every call; the
        # engine prepacks a frozen weight once.
        if n.target in _CONVOLUTIONS and len(n.args) > 1:
            w = n.args[1]
            if isinstance(w, fx.Node) and (w.op == "get_attr" or w.name in frozen):
                saves += _bytes(meta(w)) / BYTES_PER_US
        if n.target is _INT4_MATMUL:
            saves += _INT4_WIDENED_BYTES_PER_BYTE * _bytes(meta(n.args[1])) / BYTES_PER_US
    costs = CALL_US
    inputs = {i for n in part for i in n.all_input_nodes if i not in part}
    for i in inputs:
        if i.op == "get_attr" or i.name in frozen:
            continue
        if not _contiguous(meta(i)):
            costs += _bytes(meta(i)) / BYTES_PER_US
    outputs = [n for n in part if any(u not in part for u in n.users)]
    costs += OUTPUT_US * len(outputs)
    return Estimate(saves, costs, len(compute))
