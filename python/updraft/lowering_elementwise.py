"""Lowerings of elementwise ops.

An aten op whose name is an engine Elementwise op (aten.atan2 -> atan2) is lowered by one
generic rule built from the engine's own op table (`_C.op_info()`, see `same_name_lowerings`):
its leading tensor/number arguments become the engine op's inputs, cast to the dtype PyTorch's
type promotion gives, and its other arguments go to the engine attribute of the same name. A
new engine op with an aten twin is therefore lowered with no edit here.

The rules written out below are the ops that are not "same name, same arguments": different
names or argument names (hardtanh, rsub, trunc, round.decimals, div with rounding_mode), an
argument the engine op has no attribute for but can express (add/sub's alpha, pow with a
constant exponent, clamp with tensor bounds), and where, whose operands promote differently
(a bool condition and two promoted branches). They are registered first and win.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import fx

from .lowerer import (LOWERINGS, Lowerer, Unsupported, aten, meta, out_dtype, register,
                      result_dtype)


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


# -- add and sub take alpha (other * alpha), which the engine ops have no attribute for
@register(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def _add_sub(lw: Lowerer, node: fx.Node, a: dict) -> int:
    op = "add" if node.target in (aten.add.Tensor, aten.add.Scalar) else "sub"
    dt = out_dtype(node)
    x, rhs, alpha = lw.operand(a["self"], dt), a["other"], a["alpha"]
    if alpha != 1:
        if isinstance(rhs, fx.Node):
            y = lw.emit1("mul", [lw.operand(rhs, dt), lw.scalar(alpha, dt)])
        else:
            y = lw.operand(rhs * alpha, dt)
    else:
        y = lw.operand(rhs, dt)
    return lw.emit1(op, [x, y])


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


@register(aten.where.self)
def _where(lw, node, a):
    dt = out_dtype(node)
    cond = lw.operand(a["condition"], torch.bool)
    return lw.emit1("where", [cond, lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


# prims.fma (Inductor's prim, registered when torch._inductor loads; keyed by name): AOTAutograd
# decomposes addcmul and lerp into it, so a compiled optimizer step's moment updates hold it.
@register("prims.fma.default")
def _fma(lw, node, a):
    dt = out_dtype(node)
    return lw.emit1("fma", [lw.operand(a[k], dt) for k in ("a", "b", "c")])


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


# ---------------------------------------------------------------------------------------------
# Same-name ops, derived from the engine's op table


def _is_operand_type(arg: Any) -> bool:
    return isinstance(arg.type, (torch.TensorType, torch.NumberType))


def _attr_value(op: str, name: str, kind: str, v: Any) -> Any:
    """An aten argument as the engine attribute of kind `kind`, or Unsupported."""
    if isinstance(v, (fx.Node, torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Unsupported(f"{op} with a dynamic {name} ({v}); the engine attribute must be a constant")
    if kind == "float" and isinstance(v, (int, float)):
        return float(v)
    if kind == "int" and isinstance(v, int):
        return int(v)
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "str" and isinstance(v, str):
        return v
    raise Unsupported(f"{op}: argument {name}={v!r} does not fit the engine's {kind} attribute")


def same_name_lowering(info: dict, overload: Any) -> Callable | None:
    """The lowering of aten `overload` onto the engine Elementwise op `info` (an op_info()
    row) of the same name, or None when the overload does not fit that op's signature.

    Operands: the leading positional Tensor or number arguments (at most max_inputs) that are
    not named like an engine attribute. Every other argument goes to the engine attribute of
    its name; one the engine has no attribute for must be at its default (else Unsupported).
    Operand dtype: bool when the engine op takes only bool (logical_and); for a bool result
    (compares, isnan) the operands' promoted dtype; otherwise the result's dtype (int inputs of
    a float op are cast up, as torch does).
    """
    schema = overload._schema
    if len(schema.returns) != 1 or not isinstance(schema.returns[0].type, torch.TensorType):
        return None
    if any(arg.alias_info is not None and arg.alias_info.is_write for arg in schema.arguments):
        return None  # out= and in-place forms: functionalisation removes them before the backend
    op = info["name"]
    specs = {spec["name"]: spec for spec in info["attrs"]}
    operands: list[str] = []
    for arg in schema.arguments:
        if arg.kwarg_only or not _is_operand_type(arg) or arg.name in specs:
            break
        if info["max_inputs"] >= 0 and len(operands) == info["max_inputs"]:
            break
        operands.append(arg.name)
    if len(operands) < info["min_inputs"] or not any(
            isinstance(arg.type, torch.TensorType) for arg in schema.arguments if arg.name in operands):
        return None
    rest = [arg for arg in schema.arguments if arg.name not in operands]
    bool_operands = info["dtypes"] == ["bool"]

    def lower(lw: Lowerer, node: fx.Node, a: dict) -> int:
        attrs = {}
        for arg in rest:
            v = a[arg.name]
            spec = specs.get(arg.name)
            if spec is None:
                if arg.has_default_value() and v == arg.default_value:
                    continue
                raise Unsupported(f"aten.{op} with {arg.name}={v!r}: the engine's {op} has no "
                                  f"{arg.name} attribute")
            if v is None:
                continue  # aten's "not given": the engine attribute's default
            attrs[arg.name] = _attr_value(op, arg.name, spec["kind"], v)
        if bool_operands:
            dt = torch.bool
        elif out_dtype(node) == torch.bool:
            dt = result_dtype(*[a[n] for n in operands])
        else:
            dt = out_dtype(node)
        return lw.emit1(op, [lw.operand(a[n], dt) for n in operands], **attrs)

    lower.__name__ = f"same_name_{op}"
    return lower


def is_composite(op: Any) -> bool:
    """A CompositeImplicitAutograd op: AOTAutograd always decomposes it, so no backend graph
    holds it."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def aten_overloads(name: str) -> list:
    """The overloads of aten.<name> a backend graph can hold: none for a name aten lacks, and
    no composite ones."""
    try:
        packet = getattr(aten, name)
    except (AttributeError, RuntimeError):
        return []
    out = []
    for overload in packet.overloads():
        try:
            op = getattr(packet, overload)
            if not is_composite(op):
                out.append(op)
        except (AttributeError, RuntimeError):  # TorchScript-only overloads (aten::add.int)
            continue
    return out


def same_name_lowerings(infos: list[dict]) -> dict:
    """aten overload -> lowering for every engine Elementwise op (of `infos`, op_info() rows)
    with an aten op of the same name."""
    table = {}
    for info in infos:
        if info["class"] != "Elementwise":
            continue
        for overload in aten_overloads(info["name"]):
            fn = same_name_lowering(info, overload)
            if fn is not None:
                table[overload] = fn
    return table


def _register_same_name() -> None:
    try:
        from . import _C
    except ImportError:
        return  # without the extension nothing can be lowered (the Lowerer needs _C.Graph)
    for overload, fn in same_name_lowerings(_C.op_info()).items():
        LOWERINGS.setdefault(overload, fn)  # the rules written above win


_register_same_name()
