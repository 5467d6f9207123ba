"""The op table of the front end: aten OpOverload -> a function that emits engine nodes.

The machinery (Lowerer, Unsupported, register, metadata helpers) lives in `lowerer`; the
lowering rules live by family in `lowering_elementwise`, `lowering_shape`, `lowering_views` and `lowering_nn`,
which all fill the one table `LOWERINGS`. Importing this module registers every family, so
this is the module to import the table (and the node classification below) from; whether the
engine supports a node is support.py's question.
"""
from __future__ import annotations

import operator

import torch
from torch import fx

from . import lowering_elementwise, lowering_extra, lowering_nn, lowering_shape, lowering_views  # noqa: F401  (fill LOWERINGS)
from . import random_ops  # noqa: F401  (fills LOWERINGS with updraft.dropout)
from .lowerer import (DTYPES, LOWERINGS, TORCH_DTYPES, Lowerer, Unsupported, aten, bind_args,
                      engine_dim, engine_dtype, meta, op_name, register,
                      static_int, static_ints, tensor_type)

# true_divide is div under its old name; dynamic GPT-2's attention scale (a SymFloat made a
# tensor) reaches the backend as it. Registered here unless a family already has it.
def _true_divide(lw: Lowerer, node: fx.Node, a: dict) -> int:
    dt = node.meta["val"].dtype
    return lw.emit1("div", [lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


LOWERINGS.setdefault(aten.true_divide.Tensor, _true_divide)

__all__ = [
    "DTYPES", "LOWERINGS", "NON_COMPUTE", "TORCH_DTYPES", "Lowerer", "Unsupported", "bind_args",
    "engine_dim", "engine_dtype", "is_compute", "is_shape_arithmetic",
    "meta", "op_name",
    "register", "static_int", "static_ints", "tensor_type",
]


# ---------------------------------------------------------------------------------------------
# What kind of work a node does


# Ops that only rename memory or pick an output: not counted as "compute" in reports, and a
# partition made only of them is not worth a trip to the engine.
NON_COMPUTE = {
    operator.getitem, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
    aten.flatten.using_ints, aten.alias.default, aten.detach.default, aten.clone.default,
    aten.lift_fresh_copy.default, aten.permute.default, aten.t.default, aten.transpose.int,
    aten.expand.default, aten.slice.Tensor, aten.select.int,
    random_ops.SEED,  # one i64 drawn from torch's generator per call (random_ops.py)
}


def is_compute(node: fx.Node) -> bool:
    """A call that computes tensor data (not a view/getitem, not SymInt shape arithmetic)."""
    if node.op != "call_function" or node.target in NON_COMPUTE:
        return False
    val = meta(node)
    vals = val if isinstance(val, (list, tuple)) else [val]
    return any(isinstance(v, torch.Tensor) for v in vals)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def is_shape_arithmetic(node: fx.Node) -> bool:
    """A call computing sizes, not tensor data (operator.add on SymInts, sym_size, sym_max):
    it runs in Python beside the engine and is neither an engine nor a fallback op."""
    if node.op != "call_function":
        return False
    val = meta(node)
    vals = val if isinstance(val, (list, tuple)) else [val]
    return bool(vals) and all(isinstance(v, _SYMBOLIC) for v in vals)
