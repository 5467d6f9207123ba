"""Lowerings of ops that move data rather than compute it: getitem, views and reshapes,
permutes, expand, slicing, concat/split, indexing, padding, and constant factories."""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
from torch import fx

from .lowerer import (Lowerer, Unsupported, aten, bind_args, meta, norm_dim, op_name,
                      out_dtype, rank_of, register, shape_of, static_int, static_ints,
                      static_or_none, sym_expr)

_INT64_MAX = 2**63 - 1


@register(operator.getitem)
def _getitem(lw: Lowerer, node: fx.Node, a: dict) -> int:
    src, idx = node.args
    if not isinstance(src, fx.Node):
        raise Unsupported("getitem on a non-node")
    outs = lw.env.get(src)
    if outs is None:
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


@register(torch.ops.prims.convert_element_type.default)
def _convert_element_type(lw, node, a):
    # Decompositions of dynamic graphs cast with the prim (e.g. GPT-2's attention scale, a
    # SymFloat turned tensor); it is a plain dtype cast.
    return lw.cast(lw.value(node.args[0]), out_dtype(node))


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
    x = lw.value(a["self"])
    x_meta = meta(a["self"])
    out_shape = list(meta(node).shape)
    lead = len(out_shape) - x_meta.dim()
    shape = []
    for i, d in enumerate(out_shape):
        if i >= lead and static_or_none(d) is None and sym_expr(x_meta.shape[i - lead]) == sym_expr(d):
            shape.append(-1)  # keeps the input's (symbolic) size
        else:
            shape.append(lw.dim(d))  # static, or a size-1 dim broadcast to a symbolic size
    if shape == lw.vtype(x)[1]:
        return x
    return lw.emit1("expand", [x], shape=shape)


def _slice_bound(lw: Lowerer, v: Any, default: int) -> int | str:
    """A static bound (clamped to int64), or a symbolic one as engine dim text. The engine's
    shape function takes a symbolic bound as already within [0, size], but each plan slices
    with the bound's value and torch's clamping (a negative one counts from the end, as in
    k[:, :, -s0:]); `_slice` gives the result torch's size, which each plan checks."""
    if v is None:
        return default
    expr = sym_expr(v)
    if expr.is_Integer:
        return max(min(int(expr), _INT64_MAX), -_INT64_MAX)
    return lw.dim(v)


@register(aten.slice.Tensor)
def _slice(lw, node, a):
    rank = rank_of(a["self"])
    x = lw.value(a["self"])
    dim = norm_dim(a["dim"], rank)
    start = _slice_bound(lw, a["start"], 0)
    end = _slice_bound(lw, a["end"], _INT64_MAX)
    step = static_int(a["step"], "slice step")
    size = meta(a["self"]).shape[dim]
    if start == 0 and step == 1 and isinstance(end, int) and (
            (isinstance(size, int) and end >= size) or end == _INT64_MAX):
        return x
    if start == 0 and step == 1 and isinstance(end, str) and lw.vtype(x)[1][dim] == end:
        return x  # x[:s1] of a dim that is s1
    out = lw.emit1("slice", [x], dim=dim, start=start, end=end, step=step)
    # The engine's size of a slice of a dynamic dim is an expression torch may know better
    # (x[:, -1:] of a dim s0 >= 1 is 1, not max(s0 - max(s0 - 1, 0), 0); a bound that may be
    # negative): later sizes are written as torch has them, so the result takes torch's size,
    # a reshape the engine accepts when it cannot compare the two sizes and every plan checks.
    return lw.reshape(out, shape_of(meta(node)))


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


def _advanced_index(lw: Lowerer, x_arg: Any, indices: list, lower_x: bool = True) -> tuple:
    """x[:, ..., i0, i1, ...] with index tensors on adjacent dims k..k+m-1 (the leading dims
    indexed by None = ':'): the indexed dims merged into one of size n0*n1*... and the index
    tensors broadcast into one flat linear index (i0*n1*n2... + i1*n2... + ..., negative indices
    counted from the end as torch does). Returns (k, merged x, flat index, broadcast shape,
    merged x's shape); with lower_x False, x is not lowered (None: index_put's splat base).
    Shared by index (index_select on the merged dim) and index_put (scatter into it)."""
    idxs = list(indices)
    while idxs and idxs[-1] is None:
        idxs.pop()
    k = next((j for j, t in enumerate(idxs) if t is not None), len(idxs))
    if k == len(idxs) or any(t is None for t in idxs[k:]):
        raise Unsupported("index with no index tensor, or with index tensors on dims that are "
                          "not adjacent (torch moves the result dims first)")
    for t in idxs[k:]:
        if meta(t).dtype in (torch.bool, torch.uint8):
            raise Unsupported("boolean-mask indexing (data-dependent size)")
    x_meta = meta(x_arg)
    m = len(idxs) - k
    sizes = list(x_meta.shape[k:k + m])  # ints or SymInts: a dynamic dim's size is a value too
    x = lw.value(x_arg) if lower_x else None
    i64 = torch.int64
    lin = None
    stride = 1
    for t, n in reversed(list(zip(idxs[k:], sizes))):
        i = lw.operand(t, i64)
        i = lw.emit1("where", [lw.emit1("lt", [i, lw.scalar(0, i64)]),
                              lw.emit1("add", [i, lw.size_value(n)]), i])
        if static_or_none(stride) != 1:
            i = lw.emit1("mul", [i, lw.size_value(stride)])
        lin = i if lin is None else lw.emit1("add", [i, lin])
        stride = stride * n
    merged = lw.dims(x_meta.shape[:k]) + [lw.dim(stride)] + lw.dims(x_meta.shape[k + m:])
    if m > 1 and x is not None:
        x = lw.emit1("reshape", [x], shape=merged)
    # The adds broadcast the index tensors; one alone may need expanding to the common shape.
    bshape = list(torch.broadcast_shapes(*[meta(t).shape for t in idxs[k:]]))
    if lw.vtype(lin)[1] != lw.dims(bshape):
        lin = lw.emit1("expand", [lin], shape=lw.dims(bshape))
    if len(bshape) != 1:
        lin = lw.emit1("reshape", [lin], shape=[-1])
    return k, x, lin, bshape, merged


@register(aten.index.Tensor)
def _index(lw, node, a):
    # index_select along the merged dim, reshaped to x.shape[:k] + broadcast(i).shape +
    # x.shape[k+m:]. Exact (no arithmetic on x); interpolate's nearest/bilinear decompositions
    # emit it.
    k, x, lin, _, _ = _advanced_index(lw, a["self"], a["indices"])
    y = lw.emit1("index_select", [x, lin], dim=k)
    return lw.reshape(y, shape_of(meta(node)))


@register(aten.index_put.default)
def _index_put(lw, node, a):
    # x[i0, i1, ...] = values (accumulate: +=) as a scatter along the merged dim: the flat
    # index expanded over the other dims, values broadcast to x[i0, ...]'s shape and flattened
    # the same way. Duplicate indices without accumulate: the last one wins (torch leaves it
    # unspecified; its CPU kernel also writes in order).
    dt = out_dtype(node)
    # Into a fresh full(size, c) (embedding's gradient: zeros of the table's size): the scatter
    # broadcasts c itself, so no constant of the table's size is made, held and copied.
    fill = _fill_of(a["self"])
    k, x, lin, bshape, xs = _advanced_index(lw, a["self"], a["indices"], lower_x=fill is None)
    splat = {}
    if fill is not None:
        x = lw.reshape(lw.scalar(fill, dt), [1] * len(xs))
        splat = dict(shape=xs)
    # The number of indexed positions: a symbol when the index tensor's size is dynamic (a
    # static cache's prefill writes prompt-length rows at cache_position).
    nb = 1
    for d in bshape:
        nb = nb * d
    nb = lw.dim(nb)
    target = xs[:k] + [nb] + xs[k + 1:]
    picked = xs[:k] + lw.dims(bshape) + xs[k + 1:]  # the shape of x[i0, i1, ...]
    v = lw.operand(a["values"], dt)
    vshape = lw.vtype(v)[1]
    v = lw.emit1("reshape", [v], shape=[1] * (len(picked) - len(vshape)) + vshape) \
        if len(vshape) < len(picked) else v
    if lw.vtype(v)[1] != picked:
        v = lw.emit1("expand", [v], shape=picked)
    v = lw.emit1("reshape", [v], shape=target)
    idx = lw.emit1("reshape", [lin], shape=[1] * k + [nb] + [1] * (len(xs) - k - 1))
    idx = lw.emit1("expand", [idx], shape=target)
    y = lw.emit1("scatter", [x, idx, v], dim=k, reduce="add" if a["accumulate"] else "none", **splat)
    return lw.reshape(y, shape_of(meta(node)))


def _fill_of(arg: Any) -> Any:
    """c when `arg` is an aten.full(size, c) node (a number), else None."""
    if isinstance(arg, fx.Node) and arg.op == "call_function" and arg.target is aten.full.default:
        c = bind_args(arg)["fill_value"]
        if isinstance(c, (bool, int, float)) and meta(arg).device.type == "cpu":
            return c
    return None


@register(aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter.reduce,
          aten.scatter.value_reduce, aten.scatter_reduce.two)
def _scatter(lw, node, a):
    dt = out_dtype(node)
    reduce = a.get("reduce")
    if node.target is aten.scatter_add.default:
        reduce = "add"
    if node.target is aten.scatter_reduce.two and not a["include_self"]:
        raise Unsupported("scatter_reduce with include_self=False")
    if reduce not in (None, "add", "sum"):
        raise Unsupported(f"scatter with reduce={reduce!r}")
    x = lw.value(a["self"])
    rank = rank_of(a["self"])
    if rank == 0:
        raise Unsupported("scatter into a 0-d tensor")
    idx = lw.operand(a["index"], torch.int64)
    if "src" in a and a["src"] is not None:
        src = lw.operand(a["src"], dt)
    else:  # scatter.value: a number written at every index position
        src = lw.emit1("expand", [lw.reshape(lw.scalar(_number(a["value"], "value"), dt), [1] * rank)],
                       shape=lw.vtype(idx)[1])
    return lw.emit1("scatter", [x, idx, src], dim=norm_dim(a["dim"], rank),
                    reduce="none" if reduce is None else "add")


@register(aten.roll.default)
def _roll(lw, node, a):
    # roll = concat(x[n-s:], x[:n-s]) along each dim (s = shift mod n); with no dims the
    # flattened tensor is rolled and reshaped back.
    x_meta = meta(a["self"])
    x = lw.value(a["self"])
    shifts = static_ints(a["shifts"], "roll shift")
    dims = [norm_dim(d, x_meta.dim()) for d in a["dims"]]
    if not dims:
        if len(shifts) != 1:
            raise Unsupported("roll without dims takes one shift")
        flat = lw.emit1("reshape", [x], shape=[-1])
        n = static_int(x_meta.numel(), "roll size")
        return lw.reshape(_roll_dim(lw, flat, 0, shifts[0], n), shape_of(x_meta))
    if len(shifts) != len(dims):
        raise Unsupported("roll with different numbers of shifts and dims")
    for s, d in zip(shifts, dims):
        x = _roll_dim(lw, x, d, s, static_int(x_meta.shape[d], "rolled dim size"))
    return x


def _roll_dim(lw: Lowerer, x: int, dim: int, shift: int, n: int) -> int:
    if n == 0 or shift % n == 0:
        return x
    cut = n - shift % n
    tail = lw.emit1("slice", [x], dim=dim, start=cut, end=n, step=1)
    head = lw.emit1("slice", [x], dim=dim, start=0, end=cut, step=1)
    return lw.emit1("concat", [tail, head], dim=dim)


@register(aten.constant_pad_nd.default)
def _pad(lw, node, a):
    # Negative amounts crop, as in torch (the engine's pad does both: ir/ops/params.h); the
    # gradient of a pad is one (a training graph of a model that pads, e.g. MobileNet's "same").
    pads = static_ints(a["pad"], "pad")
    return lw.emit1("pad", [lw.value(a["self"])], pads=pads, value=float(a["value"]))


# -- tensors built from constants: computed now when their size is static; with a dynamic
# size they are built in the graph from a scalar (expand for full, a cumulative sum for arange),
# so one engine graph serves every size.
def _check_device(a: dict) -> None:
    if a.get("device") is not None and torch.device(a["device"]).type != "cpu":
        raise Unsupported(f"factory on device {a['device']}")


def _number(v: Any, what: str) -> Any:
    """A factory's scalar argument as a Python number (FX nodes are SymInts/SymFloats)."""
    v = meta(v)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = v.node.expr
        if getattr(expr, "is_number", False):
            return int(expr) if isinstance(v, torch.SymInt) else float(expr)
        raise Unsupported(f"factory argument {what}={expr} is dynamic")
    if not isinstance(v, (bool, int, float)):
        raise Unsupported(f"factory argument {what}={v!r} is not a number")
    return v


def _is_static_size(size: Any) -> bool:
    return all(static_or_none(meta(d)) is not None for d in size)


def _broadcast_scalar(lw: Lowerer, value: Any, dtype: torch.dtype, shape: list) -> int:
    """`value` of `dtype` broadcast to `shape` (engine dim text allowed)."""
    v = lw.scalar(value, dtype)
    if not shape:
        return v
    return lw.emit1("expand", [lw.reshape(v, [1] * len(shape))], shape=shape)


@register(aten.full.default)
def _full(lw, node, a):
    _check_device(a)
    fill = _number(a["fill_value"], "fill_value")
    dt = out_dtype(node)
    if _is_static_size(a["size"]):
        return lw.constant(torch.full(static_ints([meta(d) for d in a["size"]], "full size"), fill, dtype=dt))
    return _broadcast_scalar(lw, fill, dt, lw.dims(a["size"]))


@register(aten.scalar_tensor.default)
def _scalar_tensor(lw, node, a):
    _check_device(a)
    return lw.constant(torch.scalar_tensor(_number(a["s"], "s"), dtype=out_dtype(node)))


def counting(lw: Lowerer, n: Any, dtype: torch.dtype) -> int:
    """1, 2, ..., n as a [n] tensor of `dtype` (f32, f64 or i64) for a size n that may be
    symbolic: a cumulative sum of ones, built in the graph since no constant has its size."""
    return lw.emit1("cumsum", [_broadcast_scalar(lw, 1, dtype, [lw.dim(n)])], dim=0)


def _arange(lw: Lowerer, node: fx.Node, start: Any, end: Any, step: Any) -> int:
    dt = out_dtype(node)
    n = meta(node).shape[0]
    if static_or_none(n) is not None:
        return lw.constant(torch.arange(_number(start, "start"), _number(end, "end"), _number(step, "step"),
                                        dtype=dt))
    # Dynamic length: start + step * (cumsum(ones[n]) - 1). The engine's cumsum takes
    # f32/f64/i64; integer results are exact, float ones exact while n < 2**24 (f32).
    start, step = _number(start, "start"), _number(step, "step")
    acc = dt if dt in (torch.float32, torch.float64, torch.int64) else None
    if acc is None:
        raise Unsupported(f"arange of dynamic length in {dt}")
    idx = lw.emit1("sub", [counting(lw, n, acc), lw.scalar(1, acc)])
    if step != 1:
        idx = lw.emit1("mul", [idx, lw.scalar(step, acc)])
    if start != 0:
        idx = lw.emit1("add", [idx, lw.scalar(start, acc)])
    return idx


@register(aten.arange.start_step)
def _arange_start_step(lw, node, a):
    _check_device(a)
    return _arange(lw, node, a["start"], a["end"], a["step"])


@register(aten.arange.start)
def _arange_start(lw, node, a):
    _check_device(a)
    return _arange(lw, node, a["start"], a["end"], 1)


@register(aten.arange.default)
def _arange_default(lw, node, a):
    _check_device(a)
    return _arange(lw, node, 0, a["end"], 1)


@register(aten.full_like.default)
def _full_like(lw, node, a):
    shape = lw.dims(meta(node).shape)
    return _broadcast_scalar(lw, _number(a["fill_value"], "fill_value"), out_dtype(node), shape)
