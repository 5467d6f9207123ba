"""Lowerings of elementwise ops: unary, binary, comparisons, logical ops, where."""
from __future__ import annotations

import torch
from torch import fx

from .lowerer import (LOWERINGS, Lowerer, Unsupported, aten, meta, out_dtype, register,
                      result_dtype)


# -- unary elementwise, same name in the engine
_UNARY = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.relu.default: "relu",
    aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh", aten.exp.default: "exp",
    aten.log.default: "log", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
    aten.erf.default: "erf", aten.silu.default: "silu", aten.reciprocal.default: "reciprocal",
    aten.sin.default: "sin", aten.cos.default: "cos", aten.floor.default: "floor",
    aten.ceil.default: "ceil", aten.round.default: "round", aten.sign.default: "sign",
    aten.hardswish.default: "hardswish", aten.hardsigmoid.default: "hardsigmoid",
    aten.acos.default: "acos", aten.acosh.default: "acosh", aten.asin.default: "asin",
    aten.asinh.default: "asinh", aten.atan.default: "atan", aten.atanh.default: "atanh",
    aten.cosh.default: "cosh", aten.sinh.default: "sinh", aten.tan.default: "tan",
    aten.log1p.default: "log1p", aten.expm1.default: "expm1", aten.log2.default: "log2",
    aten.log10.default: "log10", aten.exp2.default: "exp2",
}


def _unary(lw: Lowerer, node: fx.Node, a: dict) -> int:
    x = lw.operand(node.args[0], out_dtype(node))
    return lw.emit1(_UNARY[node.target], [x])


for _target in _UNARY:
    LOWERINGS[_target] = _unary


@register(aten.logical_not.default)
def _logical_not(lw, node, a):
    return lw.emit1("logical_not", [lw.operand(a["self"], torch.bool)])


@register(aten.isnan.default)
def _isnan(lw, node, a):
    return lw.emit1("isnan", [lw.value(a["self"])])


@register(aten.gelu.default)
def _gelu(lw, node, a):
    return lw.emit1("gelu", [lw.operand(a["self"], out_dtype(node))], approximate=a["approximate"])


@register(aten.leaky_relu.default)
def _leaky_relu(lw, node, a):
    return lw.emit1("leaky_relu", [lw.operand(a["self"], out_dtype(node))],
                    negative_slope=float(a["negative_slope"]))


@register(aten.elu.default)
def _elu(lw, node, a):
    if a["scale"] != 1 or a["input_scale"] != 1:
        raise Unsupported("elu with scale or input_scale != 1")
    return lw.emit1("elu", [lw.operand(a["self"], out_dtype(node))], alpha=float(a["alpha"]))


@register(aten.clamp.default, aten.hardtanh.default)
def _clamp(lw, node, a):
    lo = a.get("min", a.get("min_val"))
    hi = a.get("max", a.get("max_val"))
    dt = out_dtype(node)
    x = lw.operand(a["self"], dt)
    attrs = {}
    for name, bound in (("min", lo), ("max", hi)):
        if isinstance(bound, fx.Node):  # a SymInt/SymFloat (an image size): known at run time only
            raise Unsupported(f"clamp with a dynamic {name} bound ({bound.name})")
        if bound is not None:
            attrs[name] = float(bound)
    if not dt.is_floating_point:
        # A float bound on an int tensor is a different op in torch (promotion); keep it exact.
        if any(not float(v).is_integer() for v in attrs.values()):
            raise Unsupported("clamp of an integer tensor with fractional bounds")
    return lw.emit1("clamp", [x], **attrs)


@register(aten.clamp.Tensor)
def _clamp_tensor(lw, node, a):
    dt = out_dtype(node)
    x = lw.operand(a["self"], dt)
    if a["min"] is not None:
        x = lw.emit1("maximum", [x, lw.operand(a["min"], dt)])
    if a["max"] is not None:
        x = lw.emit1("minimum", [x, lw.operand(a["max"], dt)])
    return x


@register(aten.pow.Tensor_Scalar)
def _pow_scalar(lw, node, a):
    dt = out_dtype(node)
    x = lw.operand(a["self"], dt)
    e = a["exponent"]
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        raise Unsupported(f"pow exponent {e!r} is not a number")
    if e == 1:
        return x
    if e == 2:
        return lw.emit1("mul", [x, x])
    return lw.emit1("pow_scalar", [x], exponent=float(e))


@register(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(lw, node, a):
    dt = out_dtype(node)
    return lw.emit1("pow", [lw.operand(a["self"], dt), lw.operand(a["exponent"], dt)])


# -- binary elementwise
_BINARY = {
    aten.add.Tensor: "add", aten.add.Scalar: "add", aten.sub.Tensor: "sub", aten.sub.Scalar: "sub",
    aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
    aten.maximum.default: "maximum", aten.minimum.default: "minimum",
    aten.remainder.Tensor: "remainder", aten.remainder.Scalar: "remainder",
    aten.floor_divide.default: "floor_divide",
    aten.atan2.default: "atan2", aten.fmod.Tensor: "fmod", aten.fmod.Scalar: "fmod",
    aten.bitwise_and.Tensor: "bitwise_and", aten.bitwise_and.Scalar: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or", aten.bitwise_or.Scalar: "bitwise_or",
}


def _binary(lw: Lowerer, node: fx.Node, a: dict) -> int:
    op = _BINARY[node.target]
    dt = out_dtype(node)
    lhs, rhs = node.args[0], node.args[1]
    x = lw.operand(lhs, dt)
    alpha = a.get("alpha", 1)
    if alpha is not None and alpha != 1:
        if isinstance(rhs, fx.Node):
            y = lw.emit1("mul", [lw.operand(rhs, dt), lw.scalar(alpha, dt)])
        else:
            y = lw.operand(rhs * alpha, dt)
    else:
        y = lw.operand(rhs, dt)
    return lw.emit1(op, [x, y])


for _target in _BINARY:
    LOWERINGS[_target] = _binary


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(lw, node, a):
    dt = out_dtype(node)
    x = lw.operand(a["self"], dt)
    if a["alpha"] != 1:
        x = lw.emit1("mul", [x, lw.scalar(a["alpha"], dt)])
    return lw.emit1("sub", [lw.operand(a["other"], dt), x])


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(lw, node, a):
    dt = out_dtype(node)
    mode = a["rounding_mode"]
    x, y = lw.operand(a["self"], dt), lw.operand(a["other"], dt)
    if mode is None:
        return lw.emit1("div", [x, y])
    if mode == "floor":
        return lw.emit1("floor_divide", [x, y])
    if not dt.is_floating_point:
        raise Unsupported(f"div with rounding_mode='trunc' on {dt}")
    return _trunc(lw, lw.emit1("div", [x, y]))  # ATen: trunc(a / b)


_COMPARE = {
    aten.eq.Tensor: "eq", aten.eq.Scalar: "eq", aten.ne.Tensor: "ne", aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt", aten.lt.Scalar: "lt", aten.le.Tensor: "le", aten.le.Scalar: "le",
    aten.gt.Tensor: "gt", aten.gt.Scalar: "gt", aten.ge.Tensor: "ge", aten.ge.Scalar: "ge",
}


def _compare(lw: Lowerer, node: fx.Node, a: dict) -> int:
    dt = result_dtype(node.args[0], node.args[1])
    return lw.emit1(_COMPARE[node.target], [lw.operand(node.args[0], dt), lw.operand(node.args[1], dt)])


for _target in _COMPARE:
    LOWERINGS[_target] = _compare


@register(aten.logical_and.default, aten.logical_or.default)
def _logical(lw, node, a):
    op = "logical_and" if node.target is aten.logical_and.default else "logical_or"
    return lw.emit1(op, [lw.operand(a["self"], torch.bool), lw.operand(a["other"], torch.bool)])


@register(aten.where.self)
def _where(lw, node, a):
    dt = out_dtype(node)
    cond = lw.operand(a["condition"], torch.bool)
    return lw.emit1("where", [cond, lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


# -- exact compositions of engine ops (no rounding beyond what torch's own kernel does)
@register(aten.isinf.default)
def _isinf(lw, node, a):
    dt = meta(a["self"]).dtype
    if not dt.is_floating_point:
        raise Unsupported(f"isinf of a {dt} tensor")
    x = lw.value(a["self"])
    return lw.emit1("eq", [lw.emit1("abs", [x]), lw.scalar(float("inf"), dt)])


@register(aten.logical_xor.default)
def _logical_xor(lw, node, a):
    return lw.emit1("ne", [lw.operand(a["self"], torch.bool), lw.operand(a["other"], torch.bool)])


def _trunc(lw: Lowerer, x: int) -> int:
    # trunc(x) = x < 0 ? ceil(x) : floor(x); NaN and +-inf pass through floor unchanged.
    neg = lw.emit1("lt", [x, lw.scalar(0.0, lw.dtype_of(x))])
    return lw.emit1("where", [neg, lw.emit1("ceil", [x]), lw.emit1("floor", [x])])


@register(aten.trunc.default)
def _trunc_op(lw, node, a):
    dt = out_dtype(node)
    x = lw.operand(a["self"], dt)
    return _trunc(lw, x) if dt.is_floating_point else x


@register(aten.round.decimals)
def _round_decimals(lw, node, a):
    # ATen: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for d < 0, with the
    # power computed in the tensor's dtype.
    dt = out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported(f"round(decimals) of a {dt} tensor")
    d = a["decimals"]
    x = lw.operand(a["self"], dt)
    if d == 0:
        return lw.emit1("round", [x])
    p = lw.scalar(float(torch.tensor(10.0, dtype=dt) ** abs(d)), dt)
    if d > 0:
        return lw.emit1("div", [lw.emit1("round", [lw.emit1("mul", [x, p])]), p])
    return lw.emit1("mul", [lw.emit1("round", [lw.emit1("div", [x, p])]), p])
