"""The op table of the front end: aten OpOverload -> a function that emits engine nodes.

Each entry is `fn(lw: Lowerer, node: fx.Node, a: dict) -> id | list[id | None]`, where `a` holds
the node's arguments by schema name (defaults filled in). A function returns the engine value id
of the node's result, or a list for nodes with several outputs (None marks an output the engine
does not compute; a user of it makes the node unsupported). Functions raise `Unsupported(reason)`
for argument combinations the engine cannot express.

The engine's contract is docs/ops.md. Binary engine ops need equal input dtypes, so every
lowering casts its operands to the dtype PyTorch's type promotion gives (read from
node.meta["val"]); `Lowerer.lower` then checks the result's dtype and static shape against the
node's meta, so a wrong lowering turns into a fallback with a reason, never a wrong answer.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch
from torch import fx

aten = torch.ops.aten

# torch dtype -> engine dtype name.
DTYPES = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool",
}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}

_INT64_MAX = 2**63 - 1


class Unsupported(Exception):
    """The engine cannot run this node; str(self) is the reason shown in reports."""


def _c():
    from . import _C  # imported lazily: the pure-Python parts work without the extension
    return _C


# ---------------------------------------------------------------------------------------------
# Metadata helpers


def check_op(op: str, inputs: list, attrs: dict) -> str | None:
    """C.check_op: None if the engine can run `op` on these (dtype, shape) inputs."""
    C = _c()
    try:
        return C.check_op(op, inputs, attrs)
    except TypeError:
        # Bindings built without nanobind's std::pair caster reject every call; then ask for the
        # CPU kernel here, and Graph.add_node (called next) validates dtypes, shapes and attrs.
        if hasattr(C, "has_cpu_kernel") and op in C.op_names() and not C.has_cpu_kernel(op):
            return f"the engine has no CPU kernel for {op}"
        return None


def meta(arg: Any) -> Any:
    """The FakeTensor / SymInt / list that an FX node produces, or the Python value itself."""
    if isinstance(arg, fx.Node):
        return arg.meta.get("val", arg.meta.get("example_value"))
    return arg


def engine_dtype(dtype: torch.dtype) -> str:
    name = DTYPES.get(dtype)
    if name is None:
        raise Unsupported(f"dtype {dtype} has no engine equivalent")
    return name


def engine_dim(d: Any) -> int | str:
    """An int, or the text of a dynamic dim (a symbol such as s0, or an expression)."""
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        # A symbol (s0) or an expression of symbols (s0*s1): the engine keeps either as a
        # symbolic dim and binds it from the input's actual size at prepare().
        return str(expr).replace(" ", "")
    raise Unsupported(f"dim {d!r} is not an int")


def tensor_type(val: Any) -> tuple[str, list]:
    """(engine dtype, engine shape) of a FakeTensor, after checking the engine can hold it."""
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"value is a {type(val).__name__}, not a tensor")
    if val.device.type != "cpu":
        raise Unsupported(f"tensor on device {val.device}; the engine runs on the CPU")
    if val.layout != torch.strided:
        raise Unsupported(f"tensor layout {val.layout}; the engine takes dense tensors")
    if val.is_quantized:
        raise Unsupported("quantized tensor")
    if val.is_complex():
        raise Unsupported(f"complex dtype {val.dtype}")
    return engine_dtype(val.dtype), [engine_dim(d) for d in val.shape]


def static_int(v: Any, what: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, torch.SymInt):
        expr = v.node.expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        raise Unsupported(f"{what} is dynamic ({expr}); the engine needs it static")
    raise Unsupported(f"{what} must be an int, got {v!r}")


def _static_or_none(d: Any) -> int | None:
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Integer", False):
        return int(d.node.expr)
    return None


def static_ints(vs: Any, what: str) -> list[int]:
    return [static_int(v, what) for v in vs]


def _shape_of(val: torch.Tensor) -> list:
    return list(val.shape)


def bind_args(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def _result_dtype(*operands: Any) -> torch.dtype:
    """torch's type promotion for these operands (FakeTensors, nodes or Python scalars)."""
    probes = []
    for o in operands:
        m = meta(o)
        if isinstance(m, torch.Tensor):
            probes.append(torch.empty([1] * min(m.dim(), 1), dtype=m.dtype))
        elif isinstance(m, (bool, int, float)):
            probes.append(m)
        elif isinstance(m, torch.SymInt):
            probes.append(1)
        elif isinstance(m, torch.SymFloat):
            probes.append(1.0)
        else:
            raise Unsupported(f"operand {o!r} has no dtype")
    if len(probes) == 1:
        p = probes[0]
        return p.dtype if isinstance(p, torch.Tensor) else torch.tensor(p).dtype
    dt = torch.result_type(probes[0], probes[1])
    for p in probes[2:]:
        dt = torch.result_type(torch.empty((), dtype=dt), p)
    return dt


# ---------------------------------------------------------------------------------------------
# The lowerer: owns one engine graph and the map from FX nodes to engine values.


class Lowerer:
    """Emits engine nodes for FX nodes into `graph` (a C.Graph).

    Nodes are lowered on demand (`value(node)`): a node no engine op consumes is never emitted,
    which lets e.g. addmm(b, x, permute(w)) become linear(x, w) without a dead transpose.
    In check mode (`check=True`) any node that is not bound yet becomes a graph input typed by
    its meta, so one node can be tested alone.
    """

    def __init__(self, graph: Any, check: bool = False) -> None:
        self.g = graph
        self.check = check
        self.env: dict[fx.Node, Any] = {}
        self._scalars: dict[tuple, int] = {}
        self._n_consts = 0
        self._n_inputs = 0

    # -- binding values
    def bind_input(self, node: fx.Node, name: str | None = None) -> int:
        dtype, shape = tensor_type(meta(node))
        try:
            vid = self.g.add_input(name or f"in{self._n_inputs}", dtype, shape)
        except _c().UpdraftError as e:
            raise Unsupported(f"input {node.name} {dtype}{shape}: {e}") from None
        self._n_inputs += 1
        self.env[node] = vid
        return vid

    def constant(self, t: torch.Tensor, name: str | None = None) -> int:
        t = t.detach()
        if t.device.type != "cpu":
            raise Unsupported(f"constant on device {t.device}")
        if not t.is_contiguous():
            t = t.contiguous()
        vid = self.g.add_constant(name or f"const{self._n_consts}", t)
        self._n_consts += 1
        return vid

    def scalar(self, value: Any, dtype: torch.dtype) -> int:
        """A 0-d constant of `dtype`, shared between uses."""
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise Unsupported(f"scalar {value} is dynamic")
        key = (type(value), value, dtype)
        if isinstance(value, float) and math.isnan(value):
            key = ("nan", dtype)
        vid = self._scalars.get(key)
        if vid is None:
            vid = self.constant(torch.tensor(value, dtype=dtype))
            self._scalars[key] = vid
        return vid

    # -- reading values
    def value(self, arg: Any) -> int:
        """Engine id of a tensor-valued FX node, lowering it first if needed."""
        if not isinstance(arg, fx.Node):
            raise Unsupported(f"expected a tensor, got {type(arg).__name__} {arg!r}")
        vid = self.env.get(arg)
        if vid is None:
            if self.check or arg.op != "call_function":
                if not self.check:
                    raise Unsupported(f"value {arg.name} is not bound in the engine graph")
                return self.bind_input(arg)
            vid = self.lower(arg)
        if isinstance(vid, list):
            raise Unsupported(f"{arg.name} has several outputs; expected one tensor")
        return vid

    def operand(self, arg: Any, dtype: torch.dtype) -> int:
        """A tensor node cast to `dtype`, or a Python scalar as a 0-d constant of `dtype`."""
        if isinstance(arg, fx.Node):
            return self.cast(self.value(arg), dtype)
        if isinstance(arg, (bool, int, float)):
            return self.scalar(arg, dtype)
        raise Unsupported(f"operand {arg!r} is neither a tensor nor a number")

    def vtype(self, vid: int) -> tuple[str, list]:
        dt, shape = self.g.value_type(vid)
        return dt, list(shape)

    def dtype_of(self, vid: int) -> torch.dtype:
        return TORCH_DTYPES[self.vtype(vid)[0]]

    # -- emitting
    def emit(self, op: str, inputs: list[int], **attrs: Any) -> list[int]:
        C = _c()
        types = [self.g.value_type(i) for i in inputs]
        reason = check_op(op, [(d, list(s)) for d, s in types], attrs)
        if reason is not None:
            raise Unsupported(f"engine op {op}: {reason}")
        try:
            return list(self.g.add_node(op, list(inputs), attrs))
        except C.UpdraftError as e:
            raise Unsupported(f"engine op {op}: {e}") from None

    def emit1(self, op: str, inputs: list[int], **attrs: Any) -> int:
        return self.emit(op, inputs, **attrs)[0]

    def cast(self, vid: int, dtype: torch.dtype) -> int:
        if self.dtype_of(vid) == dtype:
            return vid
        return self.emit1("cast", [vid], dtype=engine_dtype(dtype))

    def reshape(self, vid: int, shape: list) -> int:
        """Reshape to `shape` (ints or SymInts); at most one dynamic dim (it becomes -1)."""
        cur = self.vtype(vid)[1]
        target: list[int] = []
        dynamic = 0
        for d in shape:
            if _static_or_none(d) is not None:
                target.append(_static_or_none(d))
            else:
                dynamic += 1
                target.append(-1)
        if dynamic > 1:
            raise Unsupported("reshape to a shape with more than one dynamic dim")
        if target == cur:
            return vid
        return self.emit1("reshape", [vid], shape=target)

    # -- one node
    def lower(self, node: fx.Node) -> Any:
        """Lowers one call_function node; returns its id (or list of ids) and records it."""
        fn = LOWERINGS.get(node.target)
        if fn is None:
            raise Unsupported(f"no lowering for {op_name(node)}")
        out = fn(self, node, bind_args(node) if hasattr(node.target, "_schema") else {})
        out = self._conform(node, out)
        self.env[node] = out
        return out

    def _conform(self, node: fx.Node, out: Any) -> Any:
        """Casts results to the node's dtype; rejects a static shape that disagrees with torch."""
        val = meta(node)
        if isinstance(out, list):
            if not isinstance(val, (list, tuple)) or len(val) != len(out):
                raise Unsupported(f"{op_name(node)}: lowering returned {len(out)} outputs")
            return [None if o is None else self._conform_one(node, o, v) for o, v in zip(out, val)]
        return self._conform_one(node, out, val)

    def _conform_one(self, node: fx.Node, vid: int, val: Any) -> int:
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"{op_name(node)} produces {type(val).__name__}, not a tensor")
        want_dt, want_shape = tensor_type(val)
        got_dt, got_shape = self.vtype(vid)
        if len(got_shape) != len(want_shape) or any(
                isinstance(w, int) and isinstance(g, int) and w != g for w, g in zip(want_shape, got_shape)):
            raise Unsupported(
                f"{op_name(node)}: engine shape {got_shape} differs from torch's {want_shape}")
        if got_dt != want_dt:
            vid = self.emit1("cast", [vid], dtype=want_dt)
        return vid


def op_name(node: fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"aten.{t._schema.name.split('::')[-1]}.{t._overloadname}" if t.namespace == "aten" \
            else str(t)
    if getattr(t, "__module__", None) in ("_operator", "operator"):
        return f"operator.{t.__name__}"
    return getattr(t, "__name__", str(t))


# ---------------------------------------------------------------------------------------------
# Lowerings. LOWERINGS is filled by the `register` decorator below.

LOWERINGS: dict[Any, Callable] = {}


def register(*targets: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return deco


def _out_dtype(node: fx.Node) -> torch.dtype:
    val = meta(node)
    if isinstance(val, (list, tuple)):
        val = val[0]
    return val.dtype


def _rank(node: fx.Node) -> int:
    return meta(node).dim()


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


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


# -- unary elementwise, same name in the engine
_UNARY = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.relu.default: "relu",
    aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh", aten.exp.default: "exp",
    aten.log.default: "log", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
    aten.erf.default: "erf", aten.silu.default: "silu", aten.reciprocal.default: "reciprocal",
    aten.sin.default: "sin", aten.cos.default: "cos", aten.floor.default: "floor",
    aten.ceil.default: "ceil", aten.round.default: "round", aten.sign.default: "sign",
    aten.hardswish.default: "hardswish", aten.hardsigmoid.default: "hardsigmoid",
}


def _unary(lw: Lowerer, node: fx.Node, a: dict) -> int:
    x = lw.operand(node.args[0], _out_dtype(node))
    return lw.emit1(_UNARY[node.target], [x])


for _t in _UNARY:
    LOWERINGS[_t] = _unary


@register(aten.logical_not.default)
def _logical_not(lw, node, a):
    return lw.emit1("logical_not", [lw.operand(a["self"], torch.bool)])


@register(aten.isnan.default)
def _isnan(lw, node, a):
    return lw.emit1("isnan", [lw.value(a["self"])])


@register(aten.gelu.default)
def _gelu(lw, node, a):
    return lw.emit1("gelu", [lw.operand(a["self"], _out_dtype(node))], approximate=a["approximate"])


@register(aten.leaky_relu.default)
def _leaky_relu(lw, node, a):
    return lw.emit1("leaky_relu", [lw.operand(a["self"], _out_dtype(node))],
                    negative_slope=float(a["negative_slope"]))


@register(aten.elu.default)
def _elu(lw, node, a):
    if a["scale"] != 1 or a["input_scale"] != 1:
        raise Unsupported("elu with scale or input_scale != 1")
    return lw.emit1("elu", [lw.operand(a["self"], _out_dtype(node))], alpha=float(a["alpha"]))


@register(aten.clamp.default, aten.hardtanh.default)
def _clamp(lw, node, a):
    lo = a.get("min", a.get("min_val"))
    hi = a.get("max", a.get("max_val"))
    dt = _out_dtype(node)
    x = lw.operand(a["self"], dt)
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    if not dt.is_floating_point:
        # A float bound on an int tensor is a different op in torch (promotion); keep it exact.
        if any(not float(v).is_integer() for v in attrs.values()):
            raise Unsupported("clamp of an integer tensor with fractional bounds")
    return lw.emit1("clamp", [x], **attrs)


@register(aten.clamp.Tensor)
def _clamp_tensor(lw, node, a):
    dt = _out_dtype(node)
    x = lw.operand(a["self"], dt)
    if a["min"] is not None:
        x = lw.emit1("maximum", [x, lw.operand(a["min"], dt)])
    if a["max"] is not None:
        x = lw.emit1("minimum", [x, lw.operand(a["max"], dt)])
    return x


@register(aten.pow.Tensor_Scalar)
def _pow_scalar(lw, node, a):
    dt = _out_dtype(node)
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
    dt = _out_dtype(node)
    return lw.emit1("pow", [lw.operand(a["self"], dt), lw.operand(a["exponent"], dt)])


# -- binary elementwise
_BINARY = {
    aten.add.Tensor: "add", aten.add.Scalar: "add", aten.sub.Tensor: "sub", aten.sub.Scalar: "sub",
    aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
    aten.maximum.default: "maximum", aten.minimum.default: "minimum",
    aten.remainder.Tensor: "remainder", aten.remainder.Scalar: "remainder",
    aten.floor_divide.default: "floor_divide",
    aten.bitwise_and.Tensor: "bitwise_and", aten.bitwise_and.Scalar: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or", aten.bitwise_or.Scalar: "bitwise_or",
}


def _binary(lw: Lowerer, node: fx.Node, a: dict) -> int:
    op = _BINARY[node.target]
    dt = _out_dtype(node)
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


for _t in _BINARY:
    LOWERINGS[_t] = _binary


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(lw, node, a):
    dt = _out_dtype(node)
    x = lw.operand(a["self"], dt)
    if a["alpha"] != 1:
        x = lw.emit1("mul", [x, lw.scalar(a["alpha"], dt)])
    return lw.emit1("sub", [lw.operand(a["other"], dt), x])


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(lw, node, a):
    dt = _out_dtype(node)
    mode = a["rounding_mode"]
    x, y = lw.operand(a["self"], dt), lw.operand(a["other"], dt)
    if mode is None:
        return lw.emit1("div", [x, y])
    if mode == "floor":
        return lw.emit1("floor_divide", [x, y])
    raise Unsupported("div with rounding_mode='trunc'")


_COMPARE = {
    aten.eq.Tensor: "eq", aten.eq.Scalar: "eq", aten.ne.Tensor: "ne", aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt", aten.lt.Scalar: "lt", aten.le.Tensor: "le", aten.le.Scalar: "le",
    aten.gt.Tensor: "gt", aten.gt.Scalar: "gt", aten.ge.Tensor: "ge", aten.ge.Scalar: "ge",
}


def _compare(lw: Lowerer, node: fx.Node, a: dict) -> int:
    dt = _result_dtype(node.args[0], node.args[1])
    return lw.emit1(_COMPARE[node.target], [lw.operand(node.args[0], dt), lw.operand(node.args[1], dt)])


for _t in _COMPARE:
    LOWERINGS[_t] = _compare


@register(aten.logical_and.default, aten.logical_or.default)
def _logical(lw, node, a):
    op = "logical_and" if node.target is aten.logical_and.default else "logical_or"
    return lw.emit1(op, [lw.operand(a["self"], torch.bool), lw.operand(a["other"], torch.bool)])


@register(aten.where.self)
def _where(lw, node, a):
    dt = _out_dtype(node)
    cond = lw.operand(a["condition"], torch.bool)
    return lw.emit1("where", [cond, lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


# -- reductions
def _dims(dim: Any, rank: int) -> list[int]:
    if dim is None:
        return []
    if isinstance(dim, int):
        dim = [dim]
    return [_norm_dim(d, rank) for d in dim]


def _reduce(op: str, cast_input: bool = True) -> Callable:
    def fn(lw, node, a):
        x_node = a["self"]
        rank = _rank(x_node)
        dims = _dims(a.get("dim"), rank)
        x = lw.value(x_node)
        if cast_input:
            x = lw.cast(x, _out_dtype(node))
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


@register(aten.any.dim, aten.any.dims, aten.any.default)
def _any(lw, node, a):
    # any(x) = amax(x != 0 as f32) > 0: the engine has no boolean reduction.
    rank = _rank(a["self"])
    flags = lw.cast(lw.cast(lw.value(a["self"]), torch.bool), torch.float32)
    if rank == 0:
        return lw.cast(flags, torch.bool)
    m = lw.emit1("amax", [flags], dims=_dims(a.get("dim"), rank), keepdim=bool(a.get("keepdim", False)))
    return lw.cast(m, torch.bool)


@register(aten.prod.dim_int)
def _prod(lw, node, a):
    x = lw.cast(lw.value(a["self"]), _out_dtype(node))
    if _rank(a["self"]) == 0:
        return x
    return lw.emit1("prod", [x], dims=[_norm_dim(a["dim"], _rank(a["self"]))], keepdim=bool(a["keepdim"]))


@register(aten.argmax.default, aten.argmin.default)
def _argmax(lw, node, a):
    op = "argmax" if node.target is aten.argmax.default else "argmin"
    x = lw.value(a["self"])
    dim, keepdim = a["dim"], bool(a["keepdim"])
    if dim is None:
        if keepdim and _rank(a["self"]) > 0:
            raise Unsupported(f"{op} over all dims with keepdim=True")
        x = lw.emit1("reshape", [x], shape=[-1])
        dim = 0
    return lw.emit1(op, [x], dim=dim, keepdim=keepdim)


@register(aten.var.correction)
def _var(lw, node, a):
    rank = _rank(a["self"])
    x = lw.cast(lw.value(a["self"]), _out_dtype(node))
    corr = a["correction"]
    return lw.emit1("var", [x], dims=_dims(a["dim"], rank),
                    correction=1.0 if corr is None else float(corr), keepdim=bool(a["keepdim"]))


@register(aten.cumsum.default)
def _cumsum(lw, node, a):
    x = lw.cast(lw.value(a["self"]), _out_dtype(node))
    return lw.emit1("cumsum", [x], dim=_norm_dim(a["dim"], _rank(a["self"])))


# -- normalisations
@register(aten._softmax.default, aten._log_softmax.default)
def _softmax(lw, node, a):
    if a["half_to_float"]:
        raise Unsupported("softmax with half_to_float=True")
    op = "softmax" if node.target is aten._softmax.default else "log_softmax"
    return lw.emit1(op, [lw.value(a["self"])], dim=_norm_dim(a["dim"], _rank(a["self"])))


def _only_output0(node: fx.Node) -> None:
    """Multi-output norms/pools: the engine computes output 0 only."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            raise Unsupported(f"{op_name(node)}: only output 0 is computed by the engine, "
                              f"but {user.name} uses more")


@register(aten.native_layer_norm.default)
def _layer_norm(lw, node, a):
    _only_output0(node)
    dt = _out_dtype(node)
    x = lw.value(a["input"])
    ins = [x]
    w, b = a["weight"], a["bias"]
    if w is not None:
        ins.append(lw.operand(w, dt))
    if b is not None:
        ins.append(lw.operand(b, dt))
    y = lw.emit1("layer_norm", ins, normalized_ndim=len(a["normalized_shape"]), eps=float(a["eps"]),
                 has_weight=w is not None, has_bias=b is not None)
    return [y, None, None]


def _batch_norm(lw, node, x, w, b, mean, var, eps):
    _only_output0(node)
    dt = _out_dtype(node)
    ins = [lw.value(x), lw.operand(mean, dt), lw.operand(var, dt)]
    if w is not None:
        ins.append(lw.operand(w, dt))
    if b is not None:
        ins.append(lw.operand(b, dt))
    y = lw.emit1("batch_norm", ins, eps=float(eps), has_weight=w is not None, has_bias=b is not None)
    return [y, None, None]


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


# -- data movement
@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
          aten.flatten.using_ints, aten.view_copy.default)
def _reshape(lw, node, a):
    return lw.reshape(lw.value(node.args[0]), _shape_of(meta(node)))


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
    return lw.cast(lw.value(a["self"]), _out_dtype(node))


@register(aten.permute.default)
def _permute(lw, node, a):
    dims = [_norm_dim(d, _rank(a["self"])) for d in a["dims"]]
    x = lw.value(a["self"])
    if dims == sorted(dims):
        return x
    return lw.emit1("permute", [x], dims=dims)


@register(aten.t.default)
def _t(lw, node, a):
    x = lw.value(a["self"])
    return x if _rank(a["self"]) < 2 else lw.emit1("permute", [x], dims=[1, 0])


@register(aten.transpose.int)
def _transpose(lw, node, a):
    rank = _rank(a["self"])
    x = lw.value(a["self"])
    d0, d1 = _norm_dim(a["dim0"], rank), _norm_dim(a["dim1"], rank)
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
        if _static_or_none(d) is not None:
            shape.append(_static_or_none(d))
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
    rank = _rank(a["self"])
    x = lw.value(a["self"])
    dim = _norm_dim(a["dim"], rank)
    start = _slice_bound(a["start"], 0)
    end = _slice_bound(a["end"], _INT64_MAX)
    step = static_int(a["step"], "slice step")
    size = meta(a["self"]).shape[dim]
    if start == 0 and step == 1 and isinstance(size, int) and end >= size:
        return x
    return lw.emit1("slice", [x], dim=dim, start=start, end=end, step=step)


@register(aten.select.int)
def _select(lw, node, a):
    rank = _rank(a["self"])
    dim = _norm_dim(a["dim"], rank)
    index = static_int(a["index"], "select index")
    if index < 0:
        index += static_int(meta(a["self"]).shape[dim], "select of a dynamic dim from the end")
    x = lw.emit1("slice", [lw.value(a["self"])], dim=dim, start=index, end=index + 1, step=1)
    return lw.reshape(x, _shape_of(meta(node)))


@register(aten.cat.default)
def _cat(lw, node, a):
    dt = _out_dtype(node)
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
    return lw.emit1("concat", tensors, dim=_norm_dim(a["dim"], out_rank))


@register(aten.split_with_sizes.default, aten.split.Tensor)
def _split(lw, node, a):
    rank = _rank(a["self"])
    dim = _norm_dim(a["dim"], rank)
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
                    dim=_norm_dim(a["dim"], _rank(a["self"])))


@register(aten.gather.default)
def _gather(lw, node, a):
    return lw.emit1("gather", [lw.value(a["self"]), lw.operand(a["index"], torch.int64)],
                    dim=_norm_dim(a["dim"], _rank(a["self"])))


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
    lambda a, n: torch.full(static_ints(a["size"], "full size"), a["fill_value"], dtype=_out_dtype(n)))
LOWERINGS[aten.scalar_tensor.default] = _const_factory(
    lambda a, n: torch.scalar_tensor(a["s"], dtype=_out_dtype(n)))
LOWERINGS[aten.arange.start_step] = _const_factory(
    lambda a, n: torch.arange(a["start"], a["end"], a["step"], dtype=_out_dtype(n)))
LOWERINGS[aten.arange.start] = _const_factory(
    lambda a, n: torch.arange(a["start"], a["end"], dtype=_out_dtype(n)))
LOWERINGS[aten.arange.default] = _const_factory(
    lambda a, n: torch.arange(a["end"], dtype=_out_dtype(n)))


def _check_static_factory(a: dict) -> None:
    for k in ("start", "end", "step", "s", "fill_value"):
        v = a.get(k)
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            raise Unsupported(f"factory argument {k}={v} is dynamic")


for _t in (aten.full.default, aten.scalar_tensor.default, aten.arange.start_step,
           aten.arange.start, aten.arange.default):
    _inner = LOWERINGS[_t]
    LOWERINGS[_t] = (lambda inner: lambda lw, node, a: (_check_static_factory(a), inner(lw, node, a))[1])(_inner)


@register(aten.full_like.default)
def _full_like(lw, node, a):
    shape = static_ints(meta(node).shape, "full_like size")
    fill = lw.scalar(a["fill_value"], _out_dtype(node))
    return lw.emit1("expand", [lw.reshape(fill, [1] * len(shape))], shape=shape) if shape else fill


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
    dt = _out_dtype(node)
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


@register(aten.matmul.default)
def _matmul(lw, node, a):
    dt = _out_dtype(node)
    return lw.emit1("matmul", [lw.operand(a["self"], dt), lw.operand(a["other"], dt)])


@register(aten.addmm.default)
def _addmm(lw, node, a):
    dt = _out_dtype(node)
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


@register(aten.convolution.default)
def _convolution(lw, node, a):
    if a["transposed"]:
        raise Unsupported("transposed convolution")
    if _rank(a["input"]) != 4:
        raise Unsupported(f"{_rank(a['input']) - 2}-d convolution; the engine has conv2d only")
    dt = _out_dtype(node)
    ins = [lw.operand(a["input"], dt), lw.operand(a["weight"], dt)]
    if a["bias"] is not None:
        ins.append(lw.operand(a["bias"], dt))
    return lw.emit1("conv2d", ins, stride=_pair(a["stride"], "stride"),
                    padding=_pair(a["padding"], "padding"), dilation=_pair(a["dilation"], "dilation"),
                    groups=static_int(a["groups"], "groups"), has_bias=a["bias"] is not None)


def _sdpa(lw, node, q, k, v, mask, dropout_p, is_causal, scale, gqa=False) -> int:
    if dropout_p:
        raise Unsupported("attention with dropout_p > 0")
    if gqa:
        raise Unsupported("attention with enable_gqa=True")
    dt = _out_dtype(node)
    ins = [lw.operand(q, dt), lw.operand(k, dt), lw.operand(v, dt)]
    if mask is not None:
        mdt = meta(mask).dtype
        ins.append(lw.value(mask) if mdt == torch.bool else lw.operand(mask, dt))
    return lw.emit1("sdpa", ins, is_causal=bool(is_causal), scale=float(scale or 0.0),
                    has_mask=mask is not None)


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_flash_cpu(lw, node, a):
    _only_output0(node)
    y = _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
              a["is_causal"], a["scale"])
    return [y, None]


@register(aten._scaled_dot_product_efficient_attention.default)
def _sdpa_efficient(lw, node, a):
    _only_output0(node)
    y = _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_bias"], a["dropout_p"],
              a["is_causal"], a["scale"])
    return [y, None, None, None]


@register(aten.scaled_dot_product_attention.default)
def _sdpa_plain(lw, node, a):
    return _sdpa(lw, node, a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                 a["is_causal"], a["scale"], a["enable_gqa"])


@register(aten.max_pool2d_with_indices.default)
def _max_pool(lw, node, a):
    _only_output0(node)
    if _rank(a["self"]) != 4:
        raise Unsupported("max_pool2d on a 3-d (unbatched) input")
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    y = lw.emit1("max_pool2d", [lw.value(a["self"])], kernel=kernel, stride=stride,
                 padding=_pair(a["padding"], "padding"), dilation=_pair(a["dilation"], "dilation"),
                 ceil_mode=bool(a["ceil_mode"]))
    return [y, None]


@register(aten.avg_pool2d.default)
def _avg_pool(lw, node, a):
    if a["divisor_override"] is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    if _rank(a["self"]) != 4:
        raise Unsupported("avg_pool2d on a 3-d (unbatched) input")
    kernel = _pair(a["kernel_size"], "kernel_size")
    stride = _pair(a["stride"], "stride") if a["stride"] else kernel
    return lw.emit1("avg_pool2d", [lw.value(a["self"])], kernel=kernel, stride=stride,
                    padding=_pair(a["padding"], "padding"), ceil_mode=bool(a["ceil_mode"]),
                    count_include_pad=bool(a["count_include_pad"]))


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(lw, node, a):
    if _rank(a["self"]) != 4:
        raise Unsupported("adaptive_avg_pool2d on a 3-d (unbatched) input")
    return lw.emit1("adaptive_avg_pool2d", [lw.value(a["self"])],
                    output_size=_pair(a["output_size"], "output_size"))


# ---------------------------------------------------------------------------------------------
# Asking whether one node can run in the engine


# Ops that only rename memory or pick an output: not counted as "compute" in reports, and a
# partition made only of them is not worth a trip to the engine.
NON_COMPUTE = {
    operator.getitem, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
    aten.flatten.using_ints, aten.alias.default, aten.detach.default, aten.clone.default,
    aten.lift_fresh_copy.default, aten.permute.default, aten.t.default, aten.transpose.int,
    aten.expand.default, aten.slice.Tensor, aten.select.int,
}


def is_compute(node: fx.Node) -> bool:
    """A call that computes tensor data (not a view/getitem, not SymInt shape arithmetic)."""
    if node.op != "call_function" or node.target in NON_COMPUTE:
        return False
    val = meta(node)
    vals = val if isinstance(val, (list, tuple)) else [val]
    return any(isinstance(v, torch.Tensor) for v in vals)


def check_node(node: fx.Node) -> str | None:
    """None if the engine can run `node` (lowering exists and the engine accepts the ops it
    emits, for the node's dtypes and shapes); otherwise the reason."""
    if node.op != "call_function":
        return f"{node.op} node"
    if node.target not in LOWERINGS:
        return f"no lowering for {op_name(node)}"
    val = meta(node)
    vals = val if isinstance(val, (list, tuple)) else [val]
    try:
        for v in vals:
            if v is not None:
                tensor_type(v)
        for inp in node.all_input_nodes:
            m = meta(inp)
            if isinstance(m, torch.Tensor):
                tensor_type(m)
        # The compiler runs under AOT's fake mode; constants made while checking must be real.
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            Lowerer(_c().Graph(), check=True).lower(node)
    except Unsupported as e:
        return str(e)
    return None
