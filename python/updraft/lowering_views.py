"""Lowerings of view ops that reorder or pick elements: flip, as_strided, diagonal, and the
copies built on them (repeat, slice_scatter)."""
from __future__ import annotations

from typing import Any

from .lowerer import (Lowerer, Unsupported, aten, meta, norm_dim, rank_of, register,
                      static_int, static_ints)


def _static_shape(lw: Lowerer, vid: int, what: str) -> list[int]:
    shape = lw.vtype(vid)[1]
    if not all(isinstance(d, int) for d in shape):
        raise Unsupported(f"{what} needs a static shape, got {shape}")
    return shape


def _row_major_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return strides[::-1]


@register(aten.flip.default)
def _flip(lw, node, a):
    rank = rank_of(a["self"])
    dims = [norm_dim(d, max(rank, 1)) for d in static_ints(a["dims"], "flip dims")]
    return lw.emit1("flip", [lw.value(a["self"])], dims=dims)


@register(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(lw, node, a):
    # aten's as_strided indexes x's storage; the engine's indexes x's elements in row-major
    # order. The two agree when x's storage is exactly its elements, contiguous, from offset 0.
    x_meta = meta(a["self"])
    itemsize = x_meta.element_size()
    if not (x_meta.is_contiguous() and x_meta.storage_offset() == 0
            and x_meta.untyped_storage().nbytes() == x_meta.numel() * itemsize):
        raise Unsupported("as_strided of a tensor that is not its whole contiguous storage")
    offset = a["storage_offset"]
    offset = 0 if offset is None else static_int(offset, "as_strided storage_offset")
    size = static_ints(a["size"], "as_strided size")
    stride = static_ints(a["stride"], "as_strided stride")
    return lw.emit1("as_strided", [lw.value(a["self"])], size=size, stride=stride, offset=offset)


def _diagonal(lw: Lowerer, x: int, offset: int, dim1: int, dim2: int) -> int:
    # The diagonal as a strided view of x's row-major layout: drop dim1 and dim2, append the
    # diagonal's length with stride stride[dim1] + stride[dim2] (torch's own view arithmetic).
    shape = _static_shape(lw, x, "diagonal")
    rank = len(shape)
    d1, d2 = norm_dim(dim1, rank), norm_dim(dim2, rank)
    if d1 == d2:
        raise Unsupported("diagonal with dim1 == dim2")
    st = _row_major_strides(shape)
    if offset >= 0:
        n = max(min(shape[d1], shape[d2] - offset), 0)
        start = offset * st[d2]
    else:
        n = max(min(shape[d1] + offset, shape[d2]), 0)
        start = -offset * st[d1]
    if n == 0:
        start = 0
    keep = [k for k in range(rank) if k not in (d1, d2)]
    size = [shape[k] for k in keep] + [n]
    stride = [st[k] for k in keep] + [st[d1] + st[d2]]
    return lw.emit1("as_strided", [x], size=size, stride=stride, offset=start)


@register(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal_op(lw, node, a):
    return _diagonal(lw, lw.value(a["self"]), static_int(a["offset"], "diagonal offset"),
                     static_int(a["dim1"], "diagonal dim1"), static_int(a["dim2"], "diagonal dim2"))


@register(aten.repeat.default)
def _repeat(lw, node, a):
    # x.repeat(r) = expand x (as [1, s0, 1, s1, ...]) to [r0, s0, r1, s1, ...], then merge pairs.
    reps = static_ints(a["repeats"], "repeat counts")
    x = lw.value(a["self"])
    shape = _static_shape(lw, x, "repeat")
    shape = [1] * (len(reps) - len(shape)) + shape
    if not reps:
        return lw.emit1("copy", [x])
    paired = []
    for s in shape:
        paired += [1, s]
    target = []
    for r, s in zip(reps, shape):
        target += [r, s]
    y = lw.emit1("expand", [lw.reshape(x, paired)], shape=target)
    return lw.reshape(y, [r * s for r, s in zip(reps, shape)])


@register(aten.slice_scatter.default)
def _slice_scatter(lw, node, a):
    # out = x with x[start:end:step] (along dim) replaced by src: the part before, the written
    # part, the part after, joined.
    x = lw.value(a["self"])
    shape = _static_shape(lw, x, "slice_scatter")
    if not shape:
        raise Unsupported("slice_scatter of a 0-d tensor")
    step = static_int(a["step"], "slice_scatter step")
    if step < 1:
        raise Unsupported(f"slice_scatter with step {step}")
    dim = norm_dim(static_int(a["dim"], "slice_scatter dim"), len(shape))
    n = shape[dim]

    def clamp(v: Any, default: int) -> int:
        v = default if v is None else static_int(v, "slice_scatter bound")
        if v < 0:
            v += n
        return min(max(v, 0), n)

    start = clamp(a["start"], 0)
    end = max(clamp(a["end"], n), start)
    src = lw.operand(a["src"], lw.dtype_of(x))
    count = len(range(start, end, step))

    def part(v: int, lo: int, hi: int) -> list:
        return [lw.emit1("slice", [v], dim=dim, start=lo, end=hi)] if hi > lo else []

    if count == 0:
        return lw.emit1("copy", [x])
    written = [src] if step == 1 else _interleaved(lw, x, src, shape, dim, start, step, count, part)
    last = start + (count - 1) * step + 1  # one past the last element written
    parts = part(x, 0, start) + written + part(x, last, n)
    if len(parts) == 1:
        return lw.emit1("copy", [src])
    return lw.emit1("concat", parts, dim=dim)


def _interleaved(lw, x, src, shape, dim, start, step, count, part) -> list:
    """x[start : last] with every step-th element from src (a strided slice_scatter, as the
    gradient of x[:, 0::2] in a patch merge): the first count - 1 elements as rows of a
    [count - 1, step] view whose column 0 is src's, then src's last element."""
    pieces = []
    if count > 1:
        around = shape[:dim], shape[dim + 1:]
        region = lw.reshape(part(x, start, start + (count - 1) * step)[0], around[0] + [count - 1, step] + around[1])
        head = lw.reshape(part(src, 0, count - 1)[0], around[0] + [count - 1, 1] + around[1])
        rows = lw.emit1("concat", [head, lw.emit1("slice", [region], dim=dim + 1, start=1, end=step)], dim=dim + 1)
        pieces.append(lw.reshape(rows, around[0] + [(count - 1) * step] + around[1]))
    return pieces + part(src, count - 1, count)
