"""Lowerings of reductions, normalisations (softmax, layer/batch norm) and the heavy compute
ops: matmul/linear, convolution, attention, pooling."""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import fx

from .lowerer import (LOWERINGS, Lowerer, Unsupported, aten, meta, norm_dim, op_name, out_dtype,
                      rank_of, register, static_int, static_ints)
from .lowering_shape import counting
from . import quantize  # noqa: F401  (defines torch.ops.updraft.linear_int4)


# -- operand dtypes
_REDUCED_FLOATS = (torch.bfloat16, torch.float16)


def _strict_dtypes(node: fx.Node, data: list[Any], params: list[Any] = ()) -> None:
    """PyTorch's CPU kernels of the matmul family, convolution, attention and the norms take
    operands of one dtype and raise otherwise ("mat1 and mat2 must have the same dtype"), but
    their fake-tensor rules do not always check, so such a graph reaches the backend. Casting
    the operands (what `Lowerer.operand` does for ops that promote) would return numbers where
    eager raises: the node is left to PyTorch instead, so the call gives eager's error.
    `params` (norm weights and statistics) may also be float32 under bf16/f16 data, PyTorch's
    mixed-precision rule for norms."""
    tensors = [meta(x) for x in data if isinstance(x, fx.Node)]
    if not tensors:
        return
    want = tensors[0].dtype
    got = [t.dtype for t in tensors]
    for p in params:
        if isinstance(p, fx.Node):
            pd = meta(p).dtype
            got.append(want if pd == torch.float32 and want in _REDUCED_FLOATS else pd)
    if any(d != want for d in got):
        names = ", ".join(str(d).replace("torch.", "") for d in got)
        raise Unsupported(f"{op_name(node)} of mixed dtypes ({names}): PyTorch raises for these, so the node "
                          "stays in PyTorch and the call gives eager's error")


# -- reductions
def _dims(dim: Any, rank: int) -> list[int]:
    if dim is None:
        return []
    if isinstance(dim, int):
        dim = [dim]
    return [norm_dim(d, rank) for d in dim]


def _reduce(op: str, cast_input: bool = True) -> Callable:
    def fn(lw, node, a):
        x_node = a["self"]
        rank = rank_of(x_node)
        dims = _dims(a.get("dim"), rank)
        x = lw.value(x_node)
        if cast_input:
            x = lw.cast(x, out_dtype(node))
        if rank == 0:
            return x
        return lw.emit1(op, [x], dims=dims, keepdim=bool(a.get("keepdim", False)))
    return fn


LOWERINGS[aten.sum.dim_IntList] = _reduce("sum")
LOWERINGS[aten.sum.default] = _reduce("sum")
LOWERINGS[aten.mean.dim] = _reduce("mean")
LOWERINGS[aten.mean.default] = _reduce("mean")
LOWERINGS[aten.amax.default] = _reduce("amax", cast_input=False)
LOWERINGS[aten.amin.default] = _reduce("amin", cast_input=False)


@register(aten.max.default, aten.min.default)
def _max_all(lw, node, a):
    # max(x) / min(x) over every element = amax / amin with no dims (NaN propagates, as torch).
    op = "amax" if node.target is aten.max.default else "amin"
    x = lw.value(a["self"])
    if rank_of(a["self"]) == 0:
        return x
    return lw.emit1(op, [x], dims=[], keepdim=False)


@register(aten.prod.default)
def _prod_all(lw, node, a):
    x = lw.cast(lw.value(a["self"]), out_dtype(node))
    if rank_of(a["self"]) == 0:
        return x
    return lw.emit1("prod", [x], dims=[], keepdim=False)


@register(aten.any.dim, aten.any.dims, aten.any.default)
def _any(lw, node, a):
    # any(x) = amax(x != 0 as f32) > 0: the engine has no boolean reduction.
    rank = rank_of(a["self"])
    flags = lw.cast(lw.cast(lw.value(a["self"]), torch.bool), torch.float32)
    if rank == 0:
        return lw.cast(flags, torch.bool)
    m = lw.emit1("amax", [flags], dims=_dims(a.get("dim"), rank), keepdim=bool(a.get("keepdim", False)))
    return lw.cast(m, torch.bool)


@register(aten.prod.dim_int)
def _prod(lw, node, a):
    x = lw.cast(lw.value(a["self"]), out_dtype(node))
    if rank_of(a["self"]) == 0:
        return x
    return lw.emit1("prod", [x], dims=[norm_dim(a["dim"], rank_of(a["self"]))], keepdim=bool(a["keepdim"]))


@register(aten.argmax.default, aten.argmin.default)
def _argmax(lw, node, a):
    op = "argmax" if node.target is aten.argmax.default else "argmin"
    x = lw.value(a["self"])
    dim, keepdim = a["dim"], bool(a["keepdim"])
    if dim is None:
        if keepdim and rank_of(a["self"]) > 0:
            raise Unsupported(f"{op} over all dims with keepdim=True")
        x = lw.emit1("reshape", [x], shape=[-1])
        dim = 0
    return lw.emit1(op, [x], dim=dim, keepdim=keepdim)


@register(aten.max.dim, aten.min.dim)
def _max_dim(lw, node, a):
    # (values, indices) = (amax, argmax) along dim: both take NaN as the extreme and argmax the
    # first index on ties, as torch's max.dim/min.dim do.
    is_max = node.target is aten.max.dim
    x = lw.value(a["self"])
    rank = rank_of(a["self"])
    if rank == 0:  # a 0-d tensor is its own max; its index is 0
        return [x, lw.scalar(0, torch.int64)]
    dim, keepdim = norm_dim(a["dim"], rank), bool(a["keepdim"])
    values = lw.emit1("amax" if is_max else "amin", [x], dims=[dim], keepdim=keepdim)
    indices = lw.emit1("argmax" if is_max else "argmin", [x], dim=dim, keepdim=keepdim)
    return [values, indices]


@register(aten.sort.default, aten.sort.stable)
def _sort(lw, node, a):
    # The engine's sort is stable, which is also a valid answer when torch's need not be.
    dim = norm_dim(a["dim"], max(rank_of(a["self"]), 1))
    return lw.emit("sort", [lw.value(a["self"])], dim=dim, descending=bool(a["descending"]))


@register(aten.topk.default)
def _topk(lw, node, a):
    # The engine's topk runs ATen's CPU selection (partial sort or nth_element + sort, none
    # stable) on the same (value, position) buffer, so it returns the same indices among
    # equal values, and the same order with sorted=False (docs/decisions.md).
    rank = rank_of(a["self"])
    k = static_int(a["k"], "topk k")
    if rank == 0 and k != 1:
        raise Unsupported(f"topk of a 0-d tensor with k={k}")
    dim = norm_dim(a["dim"], max(rank, 1))
    return lw.emit("topk", [lw.value(a["self"])], dim=dim, k=k, largest=bool(a["largest"]),
                   sorted=bool(a["sorted"]))


@register(aten.var.correction)
def _var(lw, node, a):
    rank = rank_of(a["self"])
    x = lw.cast(lw.value(a["self"]), out_dtype(node))
    corr = a["correction"]
    return lw.emit1("var", [x], dims=_dims(a["dim"], rank),
                    correction=1.0 if corr is None else float(corr), keepdim=bool(a["keepdim"]))


@register(aten.var_mean.correction)
def _var_mean(lw, node, a):
    # Train-mode batch norm's decomposition computes its batch statistics with it.
    x = lw.cast(lw.value(a["self"]), out_dtype(node))
    dims, keepdim = _dims(a["dim"], rank_of(a["self"])), bool(a["keepdim"])
    corr = a["correction"]
    var = lw.emit1("var", [x], dims=dims, correction=1.0 if corr is None else float(corr), keepdim=keepdim)
    return [var, lw.emit1("mean", [x], dims=dims, keepdim=keepdim)]


@register(aten.cumsum.default)
def _cumsum(lw, node, a):
    # Eager converts the input to the result dtype first. The engine sums integers in i64; a
    # narrower integer result (cumsum(..., dtype=torch.int32), MoE offsets) is the i64 sum cast
    # back, which wraps as eager's narrower sum does (two's complement sums are exact mod 2^n).
    dt = out_dtype(node)
    x = lw.cast(lw.value(a["self"]), dt)
    if not dt.is_floating_point and dt != torch.int64:
        x = lw.cast(x, torch.int64)
    return lw.emit1("cumsum", [x], dim=norm_dim(a["dim"], rank_of(a["self"])))


# -- normalisations
@register(aten._softmax.default, aten._log_softmax.default)
def _softmax(lw, node, a):
    if a["half_to_float"]:
        raise Unsupported("softmax with half_to_float=True")
    op = "softmax" if node.target is aten._softmax.default else "log_softmax"
    return lw.emit1(op, [lw.value(a["self"])], dim=norm_dim(a["dim"], rank_of(a["self"])))


@register(aten._safe_softmax.default)
def _safe_softmax(lw, node, a):
    """Attention's softmax in torch's math form (training graphs, `attention_as_math_in`): a row
    whose every score is -inf (every key masked) gives 0s, not NaN. One engine softmax with
    zero_masked_rows, where the core-aten decomposition is a softmax, an -inf test of every
    score, an any-reduction and a where: four more passes over the scores per layer (ViT-B/16
    b4: six kernels, 47 ms a training step, against one softmax of 15 ms)."""
    x = lw.cast(lw.value(a["self"]), out_dtype(node))
    return lw.emit1("softmax", [x], dim=norm_dim(a["dim"], rank_of(a["self"])), zero_masked_rows=True)


def _user_beyond_output0(node: fx.Node) -> fx.Node | None:
    """A user of a multi-output node that reads more than its output 0, if any."""
    return next((u for u in node.users if u.target is not operator.getitem or u.args[1] != 0), None)


def _only_output0(node: fx.Node) -> None:
    """Multi-output norms/pools: the engine computes output 0 only."""
    user = _user_beyond_output0(node)
    if user is not None:
        raise Unsupported(f"{op_name(node)}: only output 0 is computed by the engine, "
                          f"but {user.name} uses more")


def _used_outputs(node: fx.Node) -> set:
    """Indices of a multi-output node's results that some user reads (via getitem)."""
    used = set()
    for user in node.users:
        if user.target is not operator.getitem:
            raise Unsupported(f"{op_name(node)}: {user.name} uses the result tuple whole")
        used.add(user.args[1])
    return used


@register(aten.native_layer_norm.default)
def _layer_norm(lw, node, a):
    # Output 0 is the engine's layer_norm; mean and rstd (outputs 1, 2, shaped like x with the
    # normalised dims kept as 1) are built from reductions only when something reads them:
    # mean(x), and 1 / sqrt(biased var(x) + eps), as ATen defines them.
    used = _used_outputs(node)
    dt = out_dtype(node)
    stats = [None, None]
    if used & {1, 2}:
        rank, k = rank_of(a["input"]), len(a["normalized_shape"])
        dims = list(range(rank - k, rank))
        xv = lw.value(a["input"])
        stats[0] = lw.emit1("mean", [xv], dims=dims, keepdim=True)
        var = lw.emit1("var", [xv], dims=dims, correction=0.0, keepdim=True)
        stats[1] = lw.emit1("rsqrt", [lw.emit1("add", [var, lw.scalar(float(a["eps"]), dt)])])
    x = lw.value(a["input"])
    ins = [x]
    w, b = a["weight"], a["bias"]
    _strict_dtypes(node, [a["input"]], [w, b])
    if w is not None:
        ins.append(lw.operand(w, dt))
    if b is not None:
        ins.append(lw.operand(b, dt))
    y = lw.emit1("layer_norm", ins, normalized_ndim=len(a["normalized_shape"]), eps=float(a["eps"]),
                 has_weight=w is not None, has_bias=b is not None)
    return [y] + stats


@register(aten.native_group_norm.default)
def _group_norm(lw, node, a):
    # y = (x - mean) / sqrt(var + eps) * w[c] + b[c] with mean and biased var over each group
    # of C/G channels and all spatial positions: reshape to [N, G, C/G * HxW], engine mean and
    # var (correction 0) over the last dim, then elementwise; weight/bias as [C, 1, ...]. The
    # mean and 1/sqrt(var + eps) are outputs 1 and 2 ([N, G]), which a training graph saves for
    # the gradient.
    dt = out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported(f"group_norm of {dt}")
    _strict_dtypes(node, [a["input"]], [a["weight"], a["bias"]])
    x_meta = meta(a["input"])
    c, g = static_int(a["C"], "C"), static_int(a["group"], "group")
    if x_meta.dim() < 2 or g <= 0 or c % g:
        raise Unsupported(f"group_norm with {g} groups over {c} channels")
    x = lw.value(a["input"])
    shape = lw.vtype(x)[1]
    xg = lw.emit1("reshape", [x], shape=[shape[0], g, -1])
    mean = lw.emit1("mean", [xg], dims=[2], keepdim=True)
    var = lw.emit1("var", [xg], dims=[2], correction=0.0, keepdim=True)
    inv = lw.emit1("rsqrt", [lw.emit1("add", [var, lw.scalar(float(a["eps"]), dt)])])
    y = lw.emit1("mul", [lw.emit1("sub", [xg, mean]), inv])
    y = lw.emit1("reshape", [y], shape=shape)
    per_channel = [c] + [1] * (x_meta.dim() - 2)
    if a["weight"] is not None:
        y = lw.emit1("mul", [y, lw.emit1("reshape", [lw.operand(a["weight"], dt)], shape=per_channel)])
    if a["bias"] is not None:
        y = lw.emit1("add", [y, lw.emit1("reshape", [lw.operand(a["bias"], dt)], shape=per_channel)])
    return [y] + [lw.emit1("reshape", [t], shape=[shape[0], g]) for t in (mean, inv)]


def _batch_norm(lw, node, x, w, b, mean, var, eps):
    _only_output0(node)
    _strict_dtypes(node, [x], [w, b, mean, var])
    dt = out_dtype(node)
    ins = [lw.value(x), lw.operand(mean, dt), lw.operand(var, dt)]
    if w is not None:
        ins.append(lw.operand(w, dt))
    if b is not None:
        ins.append(lw.operand(b, dt))
    y = lw.emit1("batch_norm", ins, eps=float(eps), has_weight=w is not None, has_bias=b is not None)
    return [y, None, None]


def _train_bn_dtype(node, data, params) -> torch.dtype:
    """The dtype of a train-mode batch norm (or its gradient): float32 or float64 data, with
    parameters and statistics of that dtype (_strict_dtypes lets float32 parameters pass only
    under reduced-precision data, which this refuses)."""
    _strict_dtypes(node, data, params)
    dt = meta(data[0]).dtype
    if dt not in (torch.float32, torch.float64):
        raise Unsupported(f"train-mode batch_norm of {dt}: the engine's is float32/float64")
    return dt


def _batch_stats(lw, node, a, params: list) -> tuple:
    """batch_norm_train over this batch (train-mode and no-stats batch norm): (y, mean, biased
    var, invstd = 1/sqrt(var + eps), dtype, elements per channel n). Refuses what eager refuses
    or the engine lacks: rank < 2, n < 2, dtypes other than float32/float64."""
    x, w, b = a["input"], a["weight"], a["bias"]
    dt = _train_bn_dtype(node, [x], [w, b] + params)
    if rank_of(x) < 2:
        raise Unsupported("batch_norm of a rank < 2 input")
    n = static_int(meta(x).numel() // meta(x).shape[1], "batch_norm elements per channel")
    if n < 2:  # eager raises ("Expected more than 1 value per channel when training")
        raise Unsupported("train-mode batch_norm over one value per channel")
    eps = float(a["eps"])
    ins = [lw.value(x)] + [lw.operand(p, dt) for p in (w, b) if p is not None]
    y, mean, var = lw.emit("batch_norm_train", ins, eps=eps, has_weight=w is not None, has_bias=b is not None)
    invstd = lw.emit1("rsqrt", [lw.emit1("add", [var, lw.scalar(eps, dt)])])
    return y, mean, var, invstd, dt, n


@register(aten._native_batch_norm_legit_functional.default)
def _bn_train(lw, node, a):
    """Train-mode batch norm in a training graph (docs/training.md): batch_norm_train gives y and
    this batch's mean and biased variance; the saved invstd and the new running statistics (which
    AOTAutograd writes back into the buffers) are elementwise ops on [C], in PyTorch's order:
    rm * (1 - m) + mean * m, and the variance made unbiased (n / (n - 1)) the same way."""
    if not a["training"]:
        raise Unsupported("_native_batch_norm_legit_functional with training=False")
    y, mean, var, invstd, dt, n = _batch_stats(lw, node, a, [a["running_mean"], a["running_var"]])
    momentum = float(a["momentum"])
    unbiased = lw.emit1("mul", [var, lw.scalar(n / (n - 1), dt)])

    def running(old, new):
        keep = lw.emit1("mul", [lw.operand(old, dt), lw.scalar(1.0 - momentum, dt)])
        return lw.emit1("add", [lw.emit1("mul", [new, lw.scalar(momentum, dt)]), keep])

    return [y, mean, invstd, running(a["running_mean"], mean), running(a["running_var"], unbiased)]


@register(aten._native_batch_norm_legit.no_stats)
def _bn_no_stats(lw, node, a):
    """Batch statistics with no running ones: instance norm (F.instance_norm views x as
    [1, N*C, ...] and calls this) and batch norm with track_running_stats=False. y, the batch
    mean and invstd, as _bn_train gives them."""
    if not a["training"]:
        raise Unsupported("_native_batch_norm_legit.no_stats with training=False")
    y, mean, _, invstd, _, _ = _batch_stats(lw, node, a, [])
    return [y, mean, invstd]


@register(aten.native_batch_norm_backward.default)
def _bn_backward(lw, node, a):
    """The gradient of train-mode batch norm from its saved mean and invstd (batch_norm_backward);
    each of dx, dw, db is returned only when the output mask asks for it."""
    if not a["train"] or a["save_mean"] is None or a["save_invstd"] is None:
        raise Unsupported("the gradient of an eval-mode batch_norm (running statistics)")
    w = a["weight"]
    dt = _train_bn_dtype(node, [a["input"], a["grad_out"]], [w, a["save_mean"], a["save_invstd"]])
    ins = [lw.operand(a["grad_out"], dt), lw.value(a["input"]), lw.operand(a["save_mean"], dt),
           lw.operand(a["save_invstd"], dt)]
    if w is not None:
        ins.append(lw.operand(w, dt))
    outs = lw.emit("batch_norm_backward", ins, has_weight=w is not None)
    return [o if want else None for o, want in zip(outs, a["output_mask"])]


@register(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(lw, node, a):
    return _batch_norm(lw, node, a["input"], a["weight"], a["bias"], a["running_mean"],
                       a["running_var"], a["eps"])


@register(aten.native_batch_norm.default)
def _native_bn(lw, node, a):
    if a["training"]:
        raise Unsupported("batch_norm in training mode (batch statistics)")
    return _batch_norm(lw, node, a["input"], a["weight"], a["bias"], a["running_mean"],
                       a["running_var"], a["eps"])


# -- compute
def _is_transpose_2d(arg: Any) -> bool:
    """arg is permute(w, [1, 0]) / t(w) of a 2-d tensor (the weight of a linear layer)."""
    if not isinstance(arg, fx.Node) or arg.op != "call_function":
        return False
    if arg.target is aten.t.default:
        return meta(arg.args[0]).dim() == 2
    if arg.target is aten.permute.default:
        return meta(arg.args[0]).dim() == 2 and list(arg.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0])
    return False


def _mm(lw: Lowerer, node: fx.Node, a_arg: Any, b_arg: Any, bias: Any = None) -> int:
    """a @ b (+ bias [N]) as linear when b is a transposed 2-d weight, else matmul."""
    _strict_dtypes(node, [a_arg, b_arg, bias])
    dt = out_dtype(node)
    a = lw.operand(a_arg, dt)
    extra = []
    if bias is not None:
        extra.append(bias)
    if _is_transpose_2d(b_arg):
        w = lw.operand(b_arg.args[0], dt)
        return lw.emit1("linear", [a, w] + extra, has_bias=bias is not None)
    return lw.emit1("matmul", [a, lw.operand(b_arg, dt)] + extra, has_bias=bias is not None)


@register(aten.mm.default, aten.bmm.default)
def _mm_bmm(lw, node, a):
    return _mm(lw, node, a["self"], a["mat2"])


def _compact_matmul(lw: Lowerer, op: str, x: Any, w: Any, s: Any, w_dtype: torch.dtype, s_dtype: torch.dtype) -> int:
    """linear_wq over a compact weight as the model stores it (x float32 [M, K], w and its scales
    read in place), or Unsupported naming the dtypes the engine takes."""
    if meta(x).dtype != torch.float32 or meta(w).dtype != w_dtype or meta(s).dtype != s_dtype:
        raise Unsupported(f"{op} of {meta(x).dtype} x, {meta(w).dtype} w, {meta(s).dtype} scales: the engine's is "
                          f"float32 x, {str(w_dtype).removeprefix('torch.')} w and "
                          f"{str(s_dtype).removeprefix('torch.')} scales")
    return lw.emit1("linear_wq", [lw.value(x), lw.value(w), lw.value(s)], has_weight_scale=True)


@register(aten._weight_int8pack_mm.default)
def _weight_int8pack_mm(lw, node, a):
    # x [M, K] @ (w int8 [N, K] * scales[:, None])^T: PyTorch's int8 weight-only matmul, what
    # updraft.quantize.QuantizedLinear calls. It is linear_wq with a per-row scale.
    return _compact_matmul(lw, "_weight_int8pack_mm", a["self"], a["mat2"], a["scales"], torch.int8, torch.float32)


@register(torch.ops.updraft.linear_int4.default)
def _linear_int4(lw, node, a):
    # x [M, K] @ W^T for the engine's int4 layout (updraft.quantize.QuantizedLinear("int4")): the
    # uint8 [N, K/2] weight with its bf16 [N, K/32] group scales.
    return _compact_matmul(lw, "updraft.linear_int4", a["x"], a["qweight"], a["scale"], torch.uint8, torch.bfloat16)


@register(aten.matmul.default)
def _matmul(lw, node, a):
    _strict_dtypes(node, [a["self"], a["other"]])
    dt = out_dtype(node)
    return lw.emit1("matmul", [lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


@register(aten.addmm.default)
def _addmm(lw, node, a):
    _strict_dtypes(node, [a["mat1"], a["mat2"], a["self"]])
    dt = out_dtype(node)
    bias_node, beta, alpha = a["self"], a["beta"], a["alpha"]
    out_shape = list(meta(node).shape)
    bias_meta = meta(bias_node)
    if alpha != 1:
        y = _mm(lw, node, a["mat1"], a["mat2"])
        y = lw.emit1("mul", [y, lw.scalar(alpha, dt)])
    else:
        y = None
    bias = lw.operand(bias_node, dt)
    if beta != 1:
        bias = lw.emit1("mul", [bias, lw.scalar(beta, dt)])
    if beta == 0:
        return y if y is not None else _mm(lw, node, a["mat1"], a["mat2"])
    if y is None and isinstance(bias_meta, torch.Tensor) and bias_meta.dim() >= 1 \
            and list(bias_meta.shape)[-1:] == out_shape[-1:] and all(d == 1 for d in bias_meta.shape[:-1]):
        bias = lw.reshape(bias, [out_shape[-1]])
        return _mm(lw, node, a["mat1"], a["mat2"], bias=bias)
    if y is None:
        y = _mm(lw, node, a["mat1"], a["mat2"])
    return lw.emit1("add", [y, bias])


def _pair(v: Any, what: str) -> list[int]:
    v = static_ints([v] if isinstance(v, int) else v, what)
    return v * 2 if len(v) == 1 else v


def _conv_geometry(a: dict, rank: int) -> dict:
    """aten's convolution (or its gradient) stride, padding, dilation and groups as conv2d's. A
    conv1d [N, C, L] is a conv2d over [N, C, 1, L] with a [O, C/g, 1, k] kernel (the same sums in
    the same order, so the result is what a 1-d kernel gives): its geometry acts on W, with H's
    stride 1, padding 0, dilation 1."""
    stride, padding, dilation = (static_ints(a[k], k) for k in ("stride", "padding", "dilation"))
    if rank == 3:
        stride, padding, dilation = [1] + stride[-1:], [0] + padding[-1:], [1] + dilation[-1:]
    else:
        stride, padding, dilation = (v * 2 if len(v) == 1 else v for v in (stride, padding, dilation))
    return dict(stride=stride, padding=padding, dilation=dilation, groups=static_int(a["groups"], "groups"))


def _conv_operand(lw, v: int, rank: int) -> int:
    """A conv1d operand ([N, C, L] or a [O, C/g, k] kernel) with a unit height inserted, as
    conv2d takes it; conv2d's as they are."""
    if rank == 4:
        return v
    s = lw.vtype(v)[1]
    return lw.reshape(v, s[:2] + [1] + s[2:])


def _check_conv_rank(a: dict, what: str) -> int:
    rank = rank_of(a["input"])
    if rank not in (3, 4):
        raise Unsupported(f"{what}{rank - 2}-d convolution; the engine has conv2d (and conv1d as conv2d)")
    if a["transposed"]:
        _check_output_padding(a, rank, what)
    return rank


def _check_output_padding(a: dict, rank: int, what: str) -> None:
    """A transposed convolution runs as the data gradient of the convolution it transposes,
    whose output size rounds down: that gives the transposed output's extra `output_padding`
    rows only while output_padding < stride (torch also allows it below the dilation)."""
    pads, strides = static_ints(a["output_padding"], "output_padding"), static_ints(a["stride"], "stride")
    if rank == 3:
        pads, strides = pads[-1:], strides[-1:]
    if len(strides) == 1:
        strides = strides * len(pads)
    if any(p >= s for p, s in zip(pads, strides)):
        raise Unsupported(f"{what}transposed convolution with output_padding {pads} not below its stride {strides}")


@register(aten.convolution.default)
def _convolution(lw, node, a):
    rank = _check_conv_rank(a, "")
    _strict_dtypes(node, [a["input"], a["weight"], a["bias"]])
    dt = out_dtype(node)
    ins = [_conv_operand(lw, lw.operand(a[k], dt), rank) for k in ("input", "weight")]
    if a["transposed"]:
        return _transposed_convolution(lw, node, a, ins, rank, dt)
    if a["bias"] is not None:
        ins.append(lw.operand(a["bias"], dt))
    y = lw.emit1("conv2d", ins, has_bias=a["bias"] is not None, **_conv_geometry(a, rank))
    return y if rank == 4 else lw.reshape(y, list(meta(node).shape))


def _transposed_convolution(lw, node, a, ins: list, rank: int, dt) -> int:
    """conv_transpose(x, w) is the data gradient of the convolution it transposes: that conv
    maps the output's size to x's with w [C_in, C_out/g, kh, kw] as its [O, C/g, kh, kw]
    weight, so x plays dy. The engine's gradient ops are float32 (oneDNN's backward primitives);
    the bias is a broadcast add."""
    if dt != torch.float32:
        raise Unsupported(f"a {dt} transposed convolution; the engine runs transposed convolutions in float32 only")
    out_shape = list(meta(node).shape)
    size = ([1] if rank == 3 else []) + static_ints(out_shape[2:], "transposed convolution output size")
    y = lw.emit1("conv2d_backward_data", ins, input_size=size, **_conv_geometry(a, rank))
    if a["bias"] is not None:
        y = lw.emit1("add", [y, lw.emit1("reshape", [lw.operand(a["bias"], dt)], shape=[1, -1, 1, 1])])
    return y if rank == 4 else lw.reshape(y, out_shape)


@register(aten.convolution_backward.default)
def _convolution_backward(lw, node, a):
    """A training graph's convolution gradients (docs/training.md): the input's and the weight's
    as the engine's conv2d_backward_data / conv2d_backward_weight, each only when AOTAutograd's
    output mask asks for it, the bias's as a sum of dy over N and the spatial dims. conv1d as
    conv2d, as in the forward. A transposed convolution is the data gradient of a convolution C
    from the output's size to x's (_transposed_convolution): its dx is C itself applied to dy,
    its dw C's weight gradient with x as C's output gradient and dy as C's input."""
    rank = _check_conv_rank(a, "the gradient of a ")
    _strict_dtypes(node, [a["grad_output"], a["input"], a["weight"]])
    dt = meta(a["grad_output"]).dtype
    if dt != torch.float32:
        raise Unsupported(f"the gradient of a {dt} convolution; the engine's convolution gradients are float32 only")
    want_dx, want_dw, want_db = a["output_mask"]
    geometry = _conv_geometry(a, rank)
    unit_h = [1] if rank == 3 else []
    transposed = bool(a["transposed"])
    dy = _conv_operand(lw, lw.operand(a["grad_output"], dt), rank)
    dx = dw = db = None
    if want_dx:
        w = _conv_operand(lw, lw.operand(a["weight"], dt), rank)
        if transposed:
            dx = lw.emit1("conv2d", [dy, w], has_bias=False, **geometry)
        else:
            size = unit_h + static_ints(meta(a["input"]).shape[2:], "convolution input size")
            dx = lw.emit1("conv2d_backward_data", [dy, w], input_size=size, **geometry)
        dx = dx if rank == 4 else lw.reshape(dx, list(meta(a["input"]).shape))
    if want_dw:
        x = _conv_operand(lw, lw.operand(a["input"], dt), rank)
        kernel = unit_h + static_ints(meta(a["weight"]).shape[2:], "convolution kernel size")
        dw = lw.emit1("conv2d_backward_weight", [x, dy] if transposed else [dy, x], kernel=kernel, **geometry)
        dw = dw if rank == 4 else lw.reshape(dw, list(meta(a["weight"]).shape))
    if want_db:
        db = lw.emit1("sum", [dy], dims=[0, 2, 3])
    return [dx, dw, db]


def _repeat_kv_heads(lw: Lowerer, kv: int, heads: int) -> int:
    """Grouped-query attention: key/value [B, Hkv, S, E] with each head repeated for the
    heads / Hkv query heads that share it -> [B, heads, S, E] (head h reads kv head h // group),
    as torch's SDPA with enable_gqa does."""
    shape = lw.vtype(kv)[1]
    hkv = shape[-3]
    if not isinstance(hkv, int) or not isinstance(heads, int) or hkv == 0 or heads % hkv:
        raise Unsupported(f"grouped-query attention with {heads} query heads over {hkv} key/value heads")
    if hkv == heads:
        return kv
    lead, (s, e) = shape[:-3], shape[-2:]
    x = lw.emit1("reshape", [kv], shape=lead + [hkv, 1, s, e])
    x = lw.emit1("expand", [x], shape=[-1] * len(lead) + [hkv, heads // hkv, -1, -1])
    return lw.emit1("reshape", [x], shape=lead + [heads, s, e])


def _sdpa(lw, node, q, k, v, mask, dropout_p, is_causal, scale, gqa=False, with_lse=False) -> Any:
    """The engine's sdpa: its result, or [result, log-sum-exp] with_lse."""
    if dropout_p:
        raise Unsupported("attention with dropout_p > 0")
    if scale is not None and float(scale) == 0.0:
        # torch multiplies the scores by 0 (equal weights); the engine's attribute reads 0 as
        # "the default 1/sqrt(E)".
        raise Unsupported("attention with scale=0 (the engine's sdpa reads scale 0 as the default 1/sqrt(E))")
    float_mask = mask is not None and isinstance(mask, fx.Node) and meta(mask).dtype != torch.bool
    _strict_dtypes(node, [q, k, v] + ([mask] if float_mask else []))
    dt = out_dtype(node)
    ins = [lw.operand(q, dt), lw.operand(k, dt), lw.operand(v, dt)]
    ks_e, vs_e = lw.vtype(ins[1])[1], lw.vtype(ins[2])[1]
    if len(ks_e) >= 2 and len(vs_e) >= 2 and ks_e[-2] != vs_e[-2] \
            and not (isinstance(ks_e[-2], int) and isinstance(vs_e[-2], int)):
        # A KV cache passed as separate inputs gives keys and values their own symbol for the
        # past length (torch knows they are equal only at run time). The reshape states it:
        # the plan checks the element counts agree for every binding.
        ins[2] = lw.emit1("reshape", [ins[2]], shape=vs_e[:-2] + [ks_e[-2], vs_e[-1]])
    qs, ks = meta(q).shape, meta(k).shape
    if gqa and len(qs) >= 3 and len(ks) >= 3 and qs[-3] != ks[-3]:
        # The CPU flash kernel (and SDPA with enable_gqa) shares key/value heads between groups
        # of query heads; the engine's sdpa broadcasts only, so the heads are repeated first.
        heads = static_int(qs[-3], "query heads")
        ins[1], ins[2] = (_repeat_kv_heads(lw, t, heads) for t in ins[1:])
    if mask is not None:
        mdt = meta(mask).dtype
        ins.append(lw.value(mask) if mdt == torch.bool else lw.operand(mask, dt))
    outs = lw.emit("sdpa", ins, is_causal=bool(is_causal), scale=float(scale or 0.0),
                   has_mask=mask is not None, with_lse=with_lse)
    return outs if with_lse else outs[0]


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash_cpu(lw, node, a):
    """The result, and each query row's log-sum-exp where a training graph saves it for the
    flash backward (below): torch's own second result, with torch's 0 for a row whose every key
    is masked, so either side may run the backward."""
    with_lse = 1 in _used_outputs(node)
    outs = _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                 a["is_causal"], a["scale"], gqa=True, with_lse=with_lse)
    return outs if with_lse else [outs, None]


@register(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_flash_cpu_backward(lw, node, a):
    """The flash attention gradient from what the forward kept (q, k, v, its result and each
    row's log-sum-exp): nothing of the scores' size [.., L, S] was saved, so the weights are
    recomputed, p = exp(q k^T * scale + mask - lse), then
        dv = p^T dy,  ds = p * (dy v^T - rowsum(dy * out)) * scale,  dq = ds k,  dk = ds^T q.
    One more q k^T than the math form's gradient, against the [.., L, S] weights that form saves
    per attention from the forward to the backward (docs/training.md, "Attention"). Grouped
    key/value heads (fewer than q's): their gradients are summed over each group's query heads.
    A causal mask is a constant, or built from positions where L and S are symbolic."""
    if a["dropout_p"]:
        raise Unsupported("the flash attention gradient with dropout_p > 0")
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    float_mask = mask is not None and meta(mask).dtype != torch.bool
    _strict_dtypes(node, [a["grad_out"], q, k, v, a["out"], a["logsumexp"]] + ([mask] if float_mask else []))
    dt = meta(q).dtype
    qv, kv, vv, dy, out, lse = (lw.value(a[x]) for x in ("query", "key", "value", "grad_out", "out", "logsumexp"))
    qs, ks = list(meta(q).shape), list(meta(k).shape)
    scale = float(a["scale"]) if a["scale"] is not None else 1.0 / math.sqrt(static_int(qs[-1], "head size"))
    groups = None
    if len(qs) >= 3 and len(ks) >= 3 and qs[-3] != ks[-3]:
        groups = static_int(qs[-3], "query heads") // static_int(ks[-3], "key/value heads")
        kv, vv = (_repeat_kv_heads(lw, t, static_int(qs[-3], "query heads")) for t in (kv, vv))
    s = lw.emit1("mul", [lw.emit1("matmul", [qv, kv], transpose_b=True), lw.scalar(scale, dt)])
    if a["is_causal"]:
        s = lw.emit1("where", [_causal_keep(lw, qs[-2], ks[-2]), s, lw.scalar(float("-inf"), dt)])
    if mask is not None:
        s = (lw.emit1("add", [s, lw.value(mask)]) if float_mask
             else lw.emit1("where", [lw.value(mask), s, lw.scalar(float("-inf"), dt)]))
    p = lw.emit1("exp", [lw.emit1("sub", [s, lw.reshape(lse, list(meta(a["logsumexp"]).shape) + [1])])])
    dv = lw.emit1("matmul", [p, dy], transpose_a=True)
    rowsum = lw.emit1("sum", [lw.emit1("mul", [dy, out])], dims=[len(qs) - 1], keepdim=True)
    dp = lw.emit1("matmul", [dy, vv], transpose_b=True)
    ds = lw.emit1("mul", [lw.emit1("mul", [p, lw.emit1("sub", [dp, rowsum])]), lw.scalar(scale, dt)])
    dq = lw.emit1("matmul", [ds, kv])
    dk = lw.emit1("matmul", [ds, qv], transpose_a=True)
    if groups is not None:
        dk, dv = (_sum_head_groups(lw, t, groups) for t in (dk, dv))
    return [dq, dk, dv]


def _causal_keep(lw: Lowerer, rows: Any, cols: Any) -> int:
    """torch's causal mask [L, S], True where key j <= query i (top left aligned, as the CPU
    flash kernel): a constant for static sizes, else compared positions built in the graph (a
    fine-tune with dynamic sequence lengths)."""
    if isinstance(rows, int) and isinstance(cols, int):
        return lw.constant(torch.ones(rows, cols, dtype=torch.bool).tril())
    i = lw.reshape(counting(lw, rows, torch.int64), [rows, 1])
    j = lw.reshape(counting(lw, cols, torch.int64), [1, cols])
    return lw.emit1("le", [j, i])


def _sum_head_groups(lw: Lowerer, x: int, groups: int) -> int:
    """[.., H, S, E] -> [.., H / groups, S, E]: each key/value head's gradient, summed over the
    `groups` query heads that read it (head h reads key/value head h // groups)."""
    shape = lw.vtype(x)[1]
    lead, (h, s, e) = shape[:-3], shape[-3:]
    x = lw.emit1("reshape", [x], shape=lead + [h // groups, groups, s, e])
    return lw.emit1("sum", [x], dims=[len(lead) + 1])


@register(aten._scaled_dot_product_efficient_attention.default)
def _sdpa_efficient(lw, node, a):
    _only_output0(node)
    y = _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_bias"], a["dropout_p"],
              a["is_causal"], a["scale"])
    return [y, None, None, None]


@register(aten.scaled_dot_product_attention.default)
def _sdpa_plain(lw, node, a):
    return _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                 a["is_causal"], a["scale"], gqa=bool(a["enable_gqa"]))


@register(aten.max_pool2d_with_indices.default)
def _max_pool(lw, node, a):
    """Values only (max_pool2d, oneDNN) unless the indices are used (a training graph saves them
    for the gradient): then max_pool2d_indices, ATen's loop (kernels/max_pool_indices.h)."""
    if rank_of(a["self"]) != 4:
        raise Unsupported("max_pool2d on a 3-d (unbatched) input")
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    window = dict(kernel=kernel, stride=stride, padding=_pair(a["padding"], "padding"),
                  dilation=_pair(a["dilation"], "dilation"), ceil_mode=bool(a["ceil_mode"]))
    if _user_beyond_output0(node) is not None:  # the indices
        y, indices = lw.emit("max_pool2d_indices", [lw.value(a["self"])], **window)
        return [y, indices]
    return [lw.emit1("max_pool2d", [lw.value(a["self"])], **window), None]


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool_backward(lw, node, a):
    """dy added at the saved indices into zeros of the input's size (max_pool2d_backward)."""
    if rank_of(a["self"]) != 4:
        raise Unsupported("the gradient of max_pool2d on a 3-d (unbatched) input")
    hw = static_ints(meta(a["self"]).shape[2:], "max_pool2d input size")
    return lw.emit1("max_pool2d_backward", [lw.value(a["grad_output"]), lw.value(a["indices"])], input_size=hw)


@register(aten.avg_pool2d.default)
def _avg_pool(lw, node, a):
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    padding, ceil_mode = _pair(a["padding"], "padding"), bool(a["ceil_mode"])
    x = lw.value(a["self"])
    unbatched = rank_of(a["self"]) == 3
    if unbatched:  # [C, H, W] pools as [1, C, H, W]
        x = lw.reshape(x, [1] + list(meta(a["self"]).shape))
    elif rank_of(a["self"]) != 4:
        raise Unsupported(f"avg_pool2d on a {rank_of(a['self'])}-d input")
    d = a["divisor_override"]
    if d is None:
        # Without padding, torch's divisor is the window clipped to the input either way (the
        # part ceil_mode adds past the edge never counts), so count_include_pad is moot; as
        # False it is the form oneDNN serves with ceil_mode (EfficientNet's final pool: a kernel
        # larger than the image, ceil_mode=True).
        include_pad = bool(a["count_include_pad"]) and any(padding)
        y = lw.emit1("avg_pool2d", [x], kernel=kernel, stride=stride, padding=padding,
                     ceil_mode=ceil_mode, count_include_pad=include_pad)
    else:
        # sum / d = mean over the window's valid (non-padding) elements * (their count / d).
        # The counts depend on the static spatial size only; torch computes them here, once.
        h, w = (static_int(v, "avg_pool2d spatial size") for v in meta(a["self"]).shape[-2:])
        ones = torch.ones(1, 1, h, w, dtype=torch.float64)
        counts = F.avg_pool2d(ones, kernel, stride, padding, ceil_mode, False, 1)[0, 0]
        scale = lw.constant((counts / d).to(out_dtype(node)))
        y = lw.emit1("avg_pool2d", [x], kernel=kernel, stride=stride, padding=padding,
                     ceil_mode=ceil_mode, count_include_pad=False)
        y = lw.emit1("mul", [y, scale])
    if unbatched:
        y = lw.reshape(y, list(meta(node).shape))
    return y


@register(aten.avg_pool2d_backward.default)
def _avg_pool_backward(lw, node, a):
    """The gradient of an unpadded average pool whose windows tile the input (stride = kernel,
    sizes divisible) or whose one window covers it all (EfficientNet's final pool): every input
    element is in exactly one window, so dx is dy / divisor broadcast over its window (a reshape
    and an expand). Divided, not multiplied by a reciprocal, as eager does. Overlapping or padded
    windows stay in PyTorch."""
    if rank_of(a["self"]) != 4:
        raise Unsupported("the gradient of avg_pool2d on a 3-d (unbatched) input")
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    n, c, h, w = static_ints(meta(a["self"]).shape, "avg_pool2d input size")
    oh, ow = static_ints(meta(a["grad_output"]).shape[2:], "avg_pool2d output size")
    if any(_pair(a["padding"], "padding")):
        raise Unsupported("the gradient of a padded avg_pool2d")
    whole = oh == ow == 1 and kernel[0] >= h and kernel[1] >= w
    tiles = stride == kernel and h % kernel[0] == 0 and w % kernel[1] == 0
    if not (whole or tiles):
        raise Unsupported("the gradient of avg_pool2d with overlapping or partial windows")
    win = [h, w] if whole else kernel  # the part of each window inside the input
    dt = meta(a["grad_output"]).dtype
    d = a["divisor_override"]
    dx = lw.emit1("div", [lw.value(a["grad_output"]), lw.scalar(float(d or win[0] * win[1]), dt)])
    dx = lw.emit1("reshape", [dx], shape=[n, c, oh, 1, ow, 1])
    dx = lw.emit1("expand", [dx], shape=[n, c, oh, win[0], ow, win[1]])
    return lw.emit1("reshape", [dx], shape=[n, c, h, w])


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(lw, node, a):
    if rank_of(a["self"]) != 4:
        raise Unsupported("adaptive_avg_pool2d on a 3-d (unbatched) input")
    return lw.emit1("adaptive_avg_pool2d", [lw.value(a["self"])],
                    output_size=_pair(a["output_size"], "output_size"))


@register(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool(lw, node, a):
    # When the output size divides the input size, every adaptive window is the same
    # [H/oh, W/ow] tile with that stride: max_pool2d, exact. Other sizes fall back. A training
    # graph's indices (flat h*W+w in each plane, the first maximum of a window, as ATen's
    # adaptive loop picks it) come from max_pool2d_indices over those tiles.
    x_meta = meta(a["self"])
    if x_meta.dim() != 4:
        raise Unsupported("adaptive_max_pool2d on a 3-d (unbatched) input")
    h, w = static_ints(x_meta.shape[2:], "adaptive_max_pool2d input size")
    oh, ow = _pair(a["output_size"], "output_size")
    if oh <= 0 or ow <= 0 or h % oh or w % ow:
        raise Unsupported(f"adaptive_max_pool2d from {h}x{w} to {oh}x{ow} (sizes that do not divide)")
    k = [h // oh, w // ow]
    window = dict(kernel=k, stride=k, padding=[0, 0], dilation=[1, 1], ceil_mode=False)
    if _user_beyond_output0(node) is not None:
        return list(lw.emit("max_pool2d_indices", [lw.value(a["self"])], **window))
    return [lw.emit1("max_pool2d", [lw.value(a["self"])], **window), None]


@register(aten.adaptive_max_pool2d_backward.default)
def _adaptive_max_pool_backward(lw, node, a):
    """dy added at the saved indices into zeros of the input's size, as max_pool2d's gradient
    (the indices are flat positions in each plane whatever the windows were)."""
    if rank_of(a["self"]) != 4:
        raise Unsupported("the gradient of adaptive_max_pool2d on a 3-d (unbatched) input")
    hw = static_ints(meta(a["self"]).shape[2:], "adaptive_max_pool2d input size")
    return lw.emit1("max_pool2d_backward", [lw.value(a["grad_output"]), lw.value(a["indices"])], input_size=hw)
