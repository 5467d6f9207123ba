"""Lowerings of ops that move data rather than compute it: getitem, views and reshapes,
permutes, expand, slicing, concat/split, indexing, padding, and constant factories."""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
from torch import fx

from .lowerer import (LOWERINGS, Lowerer, Unsupported, aten, meta, norm_dim, op_name,
                      out_dtype, rank_of, register, shape_of, static_int, static_ints,
                      static_or_none)

_INT64_MAX = 2**63 - 1


@register(operator.getitem)
def _getitem(lw: Lowerer, node: fx.Node, a: dict) -> int:
    src, idx = node.args
    if not isinstance(src, fx.Node):
        raise Unsupported("getitem on a non-node")
    outs = lw.env.get(src)
    if outs is None:
        if lw.check and src.op == "call_function" and src.target in LOWERINGS:
            outs = lw.lower(src)
        elif lw.check:
            return lw.bind_input(node)
        else:
            outs = lw.lower(src)
    if not isinstance(outs, list):
        raise Unsupported(f"getitem on single-output {src.name}")
    if outs[idx] is None:
        raise Unsupported(f"output {idx} of {op_name(src)} is not computed by the engine")
    return outs[idx]


# -- data movement
@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
          aten.flatten.using_ints, aten.view_copy.default)
def _reshape(lw, node, a):
    return lw.reshape(lw.value(node.args[0]), shape_of(meta(node)))


@register(aten.alias.default, aten.detach.default, aten.clone.default, aten.lift_fresh_copy.default)
def _identity(lw, node, a):
    # The aten graph is functional: a copy that nobody mutates is the same value. Graph outputs
    # that coincide with inputs or each other are materialised with `copy` by the partition.
    return lw.value(node.args[0])


@register(aten._to_copy.default)
def _to_copy(lw, node, a):
    dev = a["device"]
    if dev is not None and torch.device(dev).type != "cpu":
        raise Unsupported(f"_to_copy to device {dev}")
    if a["layout"] not in (None, torch.strided):
        raise Unsupported(f"_to_copy to layout {a['layout']}")
    return lw.cast(lw.value(a["self"]), out_dtype(node))


@register(aten.permute.default)
def _permute(lw, node, a):
    dims = [norm_dim(d, rank_of(a["self"])) for d in a["dims"]]
    x = lw.value(a["self"])
    if dims == sorted(dims):
        return x
    return lw.emit1("permute", [x], dims=dims)


@register(aten.t.default)
def _t(lw, node, a):
    x = lw.value(a["self"])
    return x if rank_of(a["self"]) < 2 else lw.emit1("permute", [x], dims=[1, 0])


@register(aten.transpose.int)
def _transpose(lw, node, a):
    rank = rank_of(a["self"])
    x = lw.value(a["self"])
    d0, d1 = norm_dim(a["dim0"], rank), norm_dim(a["dim1"], rank)
    if rank < 2 or d0 == d1:
        return x
    dims = list(range(rank))
    dims[d0], dims[d1] = d1, d0
    return lw.emit1("permute", [x], dims=dims)


@register(aten.expand.default)
def _expand(lw, node, a):
    x_meta = meta(a["self"])
    out_shape = list(meta(node).shape)
    lead = len(out_shape) - x_meta.dim()
    shape = []
    for i, d in enumerate(out_shape):
        if static_or_none(d) is not None:
            shape.append(static_or_none(d))
        elif i >= lead and x_meta.shape[i - lead] is d or (
                i >= lead and str(x_meta.shape[i - lead]) == str(d)):
            shape.append(-1)
        else:
            raise Unsupported("expand to a dynamic size that does not come from the input")
    x = lw.value(a["self"])
    if shape == lw.vtype(x)[1]:
        return x
    return lw.emit1("expand", [x], shape=shape)


def _slice_bound(v: Any, default: int) -> int:
    if v is None:
        return default
    v = static_int(v, "slice bound")
    return max(min(v, _INT64_MAX), -_INT64_MAX)


@register(aten.slice.Tensor)
def _slice(lw, node, a):
    rank = rank_of(a["self"])
    x = lw.value(a["self"])
    dim = norm_dim(a["dim"], rank)
    start = _slice_bound(a["start"], 0)
    end = _slice_bound(a["end"], _INT64_MAX)
    step = static_int(a["step"], "slice step")
    size = meta(a["self"]).shape[dim]
    if start == 0 and step == 1 and isinstance(size, int) and end >= size:
        return x
    return lw.emit1("slice", [x], dim=dim, start=start, end=end, step=step)


@register(aten.select.int)
def _select(lw, node, a):
    rank = rank_of(a["self"])
    dim = norm_dim(a["dim"], rank)
    index = static_int(a["index"], "select index")
    if index < 0:
        index += static_int(meta(a["self"]).shape[dim], "select of a dynamic dim from the end")
    x = lw.emit1("slice", [lw.value(a["self"])], dim=dim, start=index, end=index + 1, step=1)
    return lw.reshape(x, shape_of(meta(node)))


@register(aten.cat.default)
def _cat(lw, node, a):
    dt = out_dtype(node)
    out_rank = meta(node).dim()
    tensors = []
    for t in a["tensors"]:
        m = meta(t)
        # torch.cat skips 1-d empty tensors whatever the other ranks are (legacy behaviour).
        if m.dim() == 1 and m.shape[0] == 0 and out_rank != 1:
            continue
        tensors.append(lw.operand(t, dt))
    if len(tensors) == 1:
        return tensors[0]
    return lw.emit1("concat", tensors, dim=norm_dim(a["dim"], out_rank))


@register(aten.split_with_sizes.default, aten.split.Tensor)
def _split(lw, node, a):
    rank = rank_of(a["self"])
    dim = norm_dim(a["dim"], rank)
    sizes = [static_int(t.shape[dim], "split size") for t in meta(node)]
    x = lw.value(a["self"])
    if len(sizes) == 1:
        return [x]
    return list(lw.emit("split", [x], dim=dim, sizes=sizes))


@register(aten.embedding.default)
def _embedding(lw, node, a):
    return lw.emit1("embedding", [lw.value(a["weight"]), lw.value(a["indices"])])


@register(aten.index_select.default)
def _index_select(lw, node, a):
    return lw.emit1("index_select", [lw.value(a["self"]), lw.operand(a["index"], torch.int64)],
                    dim=norm_dim(a["dim"], rank_of(a["self"])))


@register(aten.gather.default)
def _gather(lw, node, a):
    return lw.emit1("gather", [lw.value(a["self"]), lw.operand(a["index"], torch.int64)],
                    dim=norm_dim(a["dim"], rank_of(a["self"])))


@register(aten.constant_pad_nd.default)
def _pad(lw, node, a):
    pads = static_ints(a["pad"], "pad")
    if any(p < 0 for p in pads):
        raise Unsupported("negative padding (cropping)")
    return lw.emit1("pad", [lw.value(a["self"])], pads=pads, value=float(a["value"]))


# -- tensors built from constants: computed now, when their size is static
def _const_factory(make: Callable) -> Callable:
    def fn(lw, node, a):
        if a.get("device") is not None and torch.device(a["device"]).type != "cpu":
            raise Unsupported(f"factory on device {a['device']}")
        t = make(a, node)
        return lw.constant(t)
    return fn


LOWERINGS[aten.full.default] = _const_factory(
    lambda a, n: torch.full(static_ints(a["size"], "full size"), a["fill_value"], dtype=out_dtype(n)))
LOWERINGS[aten.scalar_tensor.default] = _const_factory(
    lambda a, n: torch.scalar_tensor(a["s"], dtype=out_dtype(n)))
LOWERINGS[aten.arange.start_step] = _const_factory(
    lambda a, n: torch.arange(a["start"], a["end"], a["step"], dtype=out_dtype(n)))
LOWERINGS[aten.arange.start] = _const_factory(
    lambda a, n: torch.arange(a["start"], a["end"], dtype=out_dtype(n)))
LOWERINGS[aten.arange.default] = _const_factory(
    lambda a, n: torch.arange(a["end"], dtype=out_dtype(n)))


def _check_static_factory(a: dict) -> None:
    for k in ("start", "end", "step", "s", "fill_value"):
        v = a.get(k)
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            raise Unsupported(f"factory argument {k}={v} is dynamic")


for _target in (aten.full.default, aten.scalar_tensor.default, aten.arange.start_step,
           aten.arange.start, aten.arange.default):
    _inner = LOWERINGS[_target]
    LOWERINGS[_target] = (lambda inner: lambda lw, node, a: (_check_static_factory(a), inner(lw, node, a))[1])(_inner)


@register(aten.full_like.default)
def _full_like(lw, node, a):
    shape = static_ints(meta(node).shape, "full_like size")
    fill = lw.scalar(a["fill_value"], out_dtype(node))
    return lw.emit1("expand", [lw.reshape(fill, [1] * len(shape))], shape=shape) if shape else fill
