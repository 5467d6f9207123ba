"""Lowerings of ops met in real models that the other families lacked: linalg_vector_norm,
copy, bitwise_not, histc, empty/empty_permuted (docs/ops.md, "ATen ops the front end writes as
several engine ops").

Each is written as engine ops whose results are exact (data movement, integer arithmetic) or
as close as those ops are (the norms' sums). What eager answers with an error that depends on
the data (histc over a range taken from the data) stays in PyTorch: the engine cannot raise.
"""
from __future__ import annotations

import math

import torch

from .lowerer import Unsupported, aten, meta, norm_dim, out_dtype, rank_of, register
from .lowering_shape import _broadcast_scalar, _check_device, _number


def _reduce_dims(dim, rank: int) -> list[int]:
    # linalg_vector_norm: dim None or [] = every dim (the engine's empty dims list means the same)
    if dim is None:
        return []
    if isinstance(dim, int):
        dim = [dim]
    return [norm_dim(d, rank) for d in dim]


@register(aten.linalg_vector_norm.default)
def _vector_norm(lw, node, a):
    dt = out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported(f"linalg_vector_norm to {dt}")
    ord_ = _number(a["ord"], "ord")
    rank = rank_of(a["self"])
    dims, keepdim = _reduce_dims(a["dim"], rank), bool(a["keepdim"])
    # The dtype argument converts the input before the norm, as eager does.
    x = lw.cast(lw.value(a["self"]), dt)

    def reduce(op: str, v: int) -> int:
        if rank == 0:
            return v
        return lw.emit1(op, [v], dims=dims, keepdim=keepdim)

    if ord_ == 0:  # the count of non-zero entries (NaN counts)
        return reduce("sum", lw.cast(lw.emit1("ne", [x, lw.scalar(0.0, dt)]), dt))
    ax = lw.emit1("abs", [x])
    if math.isinf(ord_):
        # amax / amin propagate NaN, as eager's inf-norms do; eager rejects an empty reduction
        # and so does the engine's shape function (the node then stays in PyTorch).
        return reduce("amax" if ord_ > 0 else "amin", ax)
    if ord_ == 1:
        return reduce("sum", ax)
    if ord_ == 2:
        return lw.emit1("sqrt", [reduce("sum", lw.emit1("mul", [x, x]))])
    p = float(ord_)
    s = reduce("sum", lw.emit1("pow_scalar", [ax], exponent=p))
    return lw.emit1("pow_scalar", [s], exponent=1.0 / p)


@register(aten.copy.default)
def _copy(lw, node, a):
    # copy(self, src): src cast to self's dtype and broadcast to self's shape; self's values
    # are not read.
    val = meta(node)
    src = lw.operand(a["src"], val.dtype)
    shape = lw.dims(val.shape)
    cur = lw.vtype(src)[1]
    if cur == shape:
        return src
    if len(cur) < len(shape):
        src = lw.reshape(src, [1] * (len(shape) - len(cur)) + list(meta(a["src"]).shape))
    return lw.emit1("expand", [src], shape=shape)


@register(aten.bitwise_not.default)
def _bitwise_not(lw, node, a):
    dt = out_dtype(node)
    x = lw.value(a["self"])
    if dt == torch.bool:
        return lw.emit1("logical_not", [x])
    if dt in (torch.int64, torch.int32):
        # Two's complement: ~x = -1 - x, which never overflows (unlike -x - 1 at the minimum).
        return lw.emit1("sub", [lw.scalar(-1, dt), x])
    raise Unsupported(f"bitwise_not of {dt}")


@register(aten.empty_permuted.default, aten.empty.memory_format)
def _empty(lw, node, a):
    # Contents are unspecified and every user writes them before reading: zeros will do, and
    # keep the graph in one piece (empty_like reaches the backend as empty_permuted). Written
    # at run time from a scalar, not stored as a constant (which a cache entry would carry).
    _check_device(a)
    val = meta(node)
    return _broadcast_scalar(lw, 0, val.dtype, lw.dims(val.shape))


@register(aten.histc.default)
def _histc(lw, node, a):
    # ATen's histc (the LINEAR_INTERPOLATION bin selection of its histogram kernel): with
    # edges lo = float(min), hi = float(max) in x's dtype, an element e with lo <= e <= hi
    # (NaN fails both) goes to bin trunc((e - lo) * bins / (hi - lo)), computed in x's dtype,
    # and the bin `bins` (e == hi) folds into the last one; others are skipped. Counting uses a
    # scatter-add into bins + 1 slots, the extra one taking the skipped elements.
    dt = out_dtype(node)
    if dt not in (torch.float32, torch.float64):
        raise Unsupported(f"histc of {dt}")
    bins = int(_number(a["bins"], "bins"))
    lo_d, hi_d = float(_number(a["min"], "min")), float(_number(a["max"], "max"))
    lo = float(torch.tensor(lo_d, dtype=dt))
    hi = float(torch.tensor(hi_d, dtype=dt))
    if lo_d == hi_d or not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        # min == max takes the range from the data, where eager raises for a non-finite one;
        # the engine cannot raise on data, so this stays in PyTorch (as do eager's errors for a
        # bad range).
        raise Unsupported("histc with min == max (range from the data) or a non-finite or empty range")
    if bins <= 0:
        raise Unsupported(f"histc with bins={bins}")
    x = lw.value(a["self"])
    n = meta(a["self"]).numel()
    if rank_of(a["self"]) != 1:
        x = lw.emit1("reshape", [x], shape=[-1])
    lo_v, hi_v = lw.scalar(lo, dt), lw.scalar(hi, dt)
    inside = lw.emit1("logical_and", [lw.emit1("ge", [x, lo_v]), lw.emit1("le", [x, hi_v])])
    pos = lw.emit1("mul", [lw.emit1("sub", [x, lo_v]), lw.scalar(float(bins), dt)])
    pos = lw.emit1("div", [pos, lw.emit1("sub", [hi_v, lo_v])])
    # Outside elements get slot `bins` before the cast (their pos may be inf or NaN); inside
    # ones are in [0, bins], so the cast truncates as ATen's static_cast does.
    pos = lw.emit1("where", [inside, pos, lw.scalar(float(bins) + 1.0, dt)])
    idx = lw.cast(pos, torch.int64)
    # e == hi lands on `bins`: fold into the last bin; outside (bins + 1) becomes `bins`.
    last = lw.scalar(bins, torch.int64)
    is_top = lw.emit1("eq", [idx, last])
    idx = lw.emit1("where", [is_top, lw.scalar(bins - 1, torch.int64), idx])
    idx = lw.emit1("minimum", [idx, last])
    counts = lw.constant(torch.zeros(bins + 1, dtype=dt))
    ones = _broadcast_scalar(lw, 1.0, dt, lw.dims([n]) if not isinstance(n, int) else [n])
    hist = lw.emit1("scatter", [counts, idx, ones], dim=0, reduce="add")
    return lw.emit1("slice", [hist], dim=0, start=0, end=bins)


def _weight_transposed(w):
    """(source, True) when `w` is a transpose of the last two dims of a 3-d tensor: the
    grouped matmul reads the source with swapped strides instead of copying every expert."""
    import torch.fx as fx

    if isinstance(w, fx.Node) and w.op == "call_function" and meta(w).dim() == 3:
        if w.target is aten.transpose.int and sorted(d % 3 for d in w.args[1:3]) == [1, 2]:
            return w.args[0], True
        if w.target is aten.permute.default and [d % 3 for d in w.args[1]] == [0, 2, 1]:
            return w.args[0], True
    return w, False


@register("transformers.grouped_mm_fallback.default")
def _grouped_mm_fallback(lw, node, a):
    # transformers' MoE experts (integrations/moe.py, grouped_mm_experts_forward): rows of
    # `input` sorted by expert, `offs` the cumulative row count per expert (docs/ops.md).
    src, transposed = _weight_transposed(a["weight"])
    x, offs = lw.value(a["input"]), lw.value(a["offs"])
    return lw.emit1("grouped_mm", [x, lw.value(src), offs], transposed_w=transposed)


@register(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(lw, node, a):
    # nn.TransformerEncoderLayer's eval fast path (ATen transformer_encoder_layer_forward):
    #   h = norm_first ? LN1(src) : src
    #   x = src + out_proj(attention(in_proj(h)))            (LN1 after the add unless norm_first)
    #   y = x + ffn(norm_first ? LN2(x) : x)                 (LN2 after the add unless norm_first)
    # with ffn = linear2(relu|gelu(linear1(.))). The mask reaching it is the additive float mask
    # the module built ([B, L] key padding, [L, L] or [B, H, L, L]); a row whose keys are all
    # masked comes out NaN, as eager's fast path returns it.
    src_m = meta(a["src"])
    if src_m.dim() != 3 or src_m.dtype != torch.float32:
        raise Unsupported("encoder layer fast path on a nested or non-f32 input")
    B, L, E = src_m.shape
    H = int(_number(a["num_heads"], "num_heads"))
    E_ = int(_number(a["embed_dim"], "embed_dim"))
    if not isinstance(E, int) or E != E_ or E % H:
        raise Unsupported("encoder layer: embed_dim must be static and divisible by num_heads")
    dh = E // H
    if any(isinstance(d, int) and d == 0 for d in (B, L)):
        raise Unsupported("encoder layer on an empty input (eager returns a copy)")
    eps = float(a["eps"])
    v = lw.value

    def ln(x, w, b):
        return lw.emit1("layer_norm", [x, v(a[w]), v(a[b])], normalized_ndim=1, eps=eps)

    def linear(x, w, b):
        return lw.emit1("linear", [x, v(a[w]), v(a[b])], has_bias=True)

    src = v(a["src"])
    h = ln(src, "norm_weight_1", "norm_bias_1") if a["norm_first"] else src
    qkv = linear(h, "qkv_weight", "qkv_bias")
    q, k, val = lw.emit("split", [qkv], dim=2, sizes=[E, E, E])
    heads = [lw.emit1("permute", [lw.reshape(t, [B, L, H, dh])], dims=[0, 2, 1, 3]) for t in (q, k, val)]
    ins = list(heads)
    mask = a["mask"]
    if mask is not None:
        mm = meta(mask)
        if mm.dtype != src_m.dtype:
            raise Unsupported(f"encoder layer mask of dtype {mm.dtype} (expected the additive float mask)")
        mv = v(mask)
        if a["mask_type"] == 1:  # key padding
            if mm.dim() != 2:
                raise Unsupported(f"encoder layer key padding mask of rank {mm.dim()}")
            mv = lw.reshape(mv, [B, 1, 1, L])
        elif mm.dim() == 2:
            mv = lw.reshape(mv, [1, 1, mm.shape[0], mm.shape[1]])
        elif mm.dim() != 4:
            raise Unsupported(f"encoder layer mask of rank {mm.dim()}")
        ins.append(mv)
    att = lw.emit1("sdpa", ins, has_mask=mask is not None, scale=1.0 / math.sqrt(dh))
    if mask is not None:
        # Eager's softmax of a row of -inf is NaN; the engine's sdpa gives such rows 0.
        top = lw.emit1("amax", [ins[3]], dims=[3], keepdim=True)
        dead = lw.emit1("eq", [top, lw.scalar(-math.inf, src_m.dtype)])
        att = lw.emit1("where", [dead, lw.scalar(math.nan, src_m.dtype), att])
    att = lw.reshape(lw.emit1("permute", [att], dims=[0, 2, 1, 3]), [B, L, E])
    x = lw.emit1("add", [linear(att, "proj_weight", "proj_bias"), src])
    if not a["norm_first"]:
        x = ln(x, "norm_weight_1", "norm_bias_1")
    f = ln(x, "norm_weight_2", "norm_bias_2") if a["norm_first"] else x
    f = linear(f, "ffn_weight_1", "ffn_bias_1")
    f = lw.emit1("gelu", [f]) if a["use_gelu"] else lw.emit1("relu", [f])
    y = lw.emit1("add", [linear(f, "ffn_weight_2", "ffn_bias_2"), x])
    if not a["norm_first"]:
        y = ln(y, "norm_weight_2", "norm_bias_2")
    return y
