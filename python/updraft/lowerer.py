"""Infrastructure of the front end's lowering: engine dtypes, `Unsupported`, metadata helpers,
the `Lowerer` (one engine graph plus the map from FX nodes to engine values) and the op table.

LOWERINGS maps an aten OpOverload to `fn(lw: Lowerer, node: fx.Node, a: dict) -> id | list[id | None]`,
where `a` holds the node's arguments by schema name (defaults filled in). A function returns the
engine value id of the node's result, or a list for nodes with several outputs (None marks an
output the engine does not compute; a user of it makes the node unsupported). Functions raise
`Unsupported(reason)` for argument combinations the engine cannot express.

The table is filled by `register` in the per-family modules (lowering_elementwise,
lowering_shape, lowering_nn); `updraft.lowering` imports them all, so import the table from
there rather than from this module.

The engine's contract is docs/ops.md. Binary engine ops need equal input dtypes, so every
lowering casts its operands to the dtype PyTorch's type promotion gives (read from
node.meta["val"]); `Lowerer.lower` then checks the result's dtype and static shape against the
node's meta, so a wrong lowering turns into a fallback with a reason, never a wrong answer.
"""
from __future__ import annotations

import functools
import math
import weakref
from typing import Any, Callable, Optional, Sequence

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

class Unsupported(Exception):
    """The engine cannot run this node; str(self) is the reason shown in reports."""


# Outputs below this many elements may run on a reference kernel (a few microseconds: less
# than an engine/PyTorch boundary); larger ones need a fast kernel or stay in PyTorch
# (support.py applies it).
REFERENCE_KERNEL_MAX_NUMEL = 1024


def numel_hint(t: torch.Tensor) -> float:
    """Elements of `t` at its sizes' hints (inf when a size has none: data-dependent)."""
    n = 1
    for d in t.shape:
        h = d if isinstance(d, int) else d.node.hint
        if h is None:
            return math.inf
        n *= int(h)
    return n


def load_c():
    from . import _C  # imported lazily: the pure-Python parts work without the extension
    return _C


# ---------------------------------------------------------------------------------------------
# Metadata helpers


@functools.cache
def _engine_op_names() -> frozenset:
    return frozenset(load_c().op_names())


# (engine op, input dtypes) -> None, or why the engine has no CPU kernel for it: asked once
# per process, not once per node (see Lowerer.emit).
_kernel_verdicts: dict = {}


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


def sym_expr(d: Any) -> Any:
    """The sympy expression of a size (an int, a SymInt, or an FX node producing a SymInt)."""
    import sympy

    d = meta(d)
    if isinstance(d, bool):
        raise Unsupported(f"size {d!r} is a bool")
    if isinstance(d, int):
        return sympy.Integer(d)
    if isinstance(d, torch.SymInt):
        return canonical_size(d)
    raise Unsupported(f"size {d!r} is not an int")


def canonical_size(d: torch.SymInt) -> Any:
    """A SymInt's expression simplified by what its ShapeEnv knows: sub-expressions that an
    equality guard equates to simpler ones, then the ShapeEnv's own simplification (its symbols'
    value ranges). PyTorch's shape checks decide such equalities under the guards: MPT adds an
    ALiBi bias sliced as `bias[..., max(0, 2048 - L):]` to [.., L, L] scores, and broadcasting
    guards `2048 - max(0, 2048 - L) == L` (or bounds L <= 2048, when another check already
    did). Without that knowledge the size is not L for every L, so the engine's own shape
    inference could not accept the add: the graph was cut around every such add. The guards
    hold for every call the graph runs, so the rewrite is exact. A plain symbol is never
    rewritten, and a result over symbols the expression did not have is not taken (the engine
    binds symbols from the graph's inputs)."""
    expr = d.node.expr
    if expr.is_Integer or expr.is_Symbol:
        return expr
    env = d.node.shape_env
    eqs = _guard_equalities(env)
    if eqs:
        expr = expr.xreplace(eqs)
    try:
        simple = env.simplify(expr)
    except Exception:  # noqa: BLE001 - a ShapeEnv that cannot: the expression as it is
        return expr
    return simple if simple.free_symbols <= expr.free_symbols else expr


_EQUALITIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # ShapeEnv -> (guard count, map)


def _guard_equalities(shape_env: Any) -> dict:
    """{complex: simpler} from the ShapeEnv's equality guards; cached per guard count (kept
    beside the ShapeEnv, not on it: torch may copy or compare its fields)."""
    import sympy

    guards = getattr(shape_env, "guards", None) or []
    cached = _EQUALITIES.get(shape_env)
    if cached is not None and cached[0] == len(guards):
        return cached[1]
    eqs: dict = {}
    for g in guards:
        e = g.expr
        if not isinstance(e, sympy.Eq) or e.lhs.is_number or e.rhs.is_number:
            continue
        a, b = sorted((e.lhs, e.rhs), key=sympy.count_ops)
        # Only towards fewer symbols: a size written over a symbol that no input of the graph
        # carries could not be bound (a cache position s0 + 1 equated to a mask's length).
        if not b.is_Symbol and a != b and a.free_symbols <= b.free_symbols:
            eqs[b] = a
    try:
        _EQUALITIES[shape_env] = (len(guards), eqs)
    except TypeError:  # not weakly referable: recomputed each time
        pass
    return eqs


def dim_text(expr: Any, rename: Optional[dict] = None) -> int | str:
    """A sympy size as the engine's dim syntax (docs: src/ir/text.h): an int, or text such as
    "s0", "(s0*s1)", "((s1+1)//2)" that the bindings parse into a Dim expression.

    `rename` maps sub-expressions to engine symbol names (opaque input dims, see Lowerer).
    Raises Unsupported for operations the engine's Dim has no form of.
    """
    import sympy
    from torch.utils._sympy import functions as F

    if rename and expr in rename:
        return rename[expr]
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return expr.name

    def sub(e: Any) -> str:
        return str(dim_text(e, rename))

    def chain(args: Any, op: str) -> str:
        parts = [sub(a) for a in args]
        out = parts[0]
        for p in parts[1:]:
            out = f"({out}{op}{p})"
        return out

    if isinstance(expr, sympy.Add):
        pos = [a for a in expr.args if not (a.is_Mul and a.args[0].is_Integer and a.args[0] < 0)
               and not (a.is_Integer and a < 0)]
        neg = [-a for a in expr.args if a not in pos]
        out = chain(pos, "+") if pos else "0"
        for n in neg:
            out = f"({out}-{sub(n)})"
        return out
    if isinstance(expr, sympy.Mul):
        return chain(expr.args, "*")
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        return chain([expr.base] * int(expr.exp), "*")
    if isinstance(expr, F.FloorDiv):
        return f"({sub(expr.args[0])}//{sub(expr.args[1])})"
    if isinstance(expr, (F.Mod, F.PythonMod)):
        return f"({sub(expr.args[0])}%{sub(expr.args[1])})"
    # torch writes its own Max/Min (torch.utils._sympy.functions), not subclasses of sympy's.
    if isinstance(expr, (sympy.Max, sympy.Min, F.Max, F.Min)):
        name = "max" if isinstance(expr, (sympy.Max, F.Max)) else "min"
        out = sub(expr.args[0])
        for a in expr.args[1:]:
            out = f"{name}({out},{sub(a)})"
        return out
    raise Unsupported(f"size {expr} ({type(expr).__name__}) has no engine form")


def engine_dim(d: Any) -> int | str:
    """An int, or the text of a dynamic dim (a symbol such as s0, or an expression)."""
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        # A symbol (s0) or an expression of symbols (s0*s1): the engine keeps either as a
        # symbolic dim and binds it from the input's actual size at prepare().
        return dim_text(canonical_size(d))
    raise Unsupported(f"dim {d!r} is not an int")


def _engine_symbol(name: str) -> Any:
    """An opaque engine symbol as sympy sees it: an integer of unknown sign (a size input's
    value may be negative, e_0 = 1 - w), so sympy never simplifies max(0, e_0) to e_0."""
    import sympy

    return sympy.Symbol(name, integer=True)


def size_input_exprs(tensor_vals: list, scalar_vals: list) -> list[int]:
    """Which of a partition's scalar inputs (SymInts, as Dynamo passes them) the engine takes as
    size inputs: those whose size no tensor input carries as a plain dim. Their values bind
    symbols (arange(s0 + 1) with no tensor of size s0), so one engine compile serves every value.
    Decided from the metadata alone, so a compile-cache hit (no lowering) decides the same."""
    carried = set()
    for v in tensor_vals:
        if isinstance(v, torch.Tensor):
            for d in v.shape:
                if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                    carried.add(d.node.expr)
    out, seen = [], set()
    for i, v in enumerate(scalar_vals):
        if not isinstance(v, torch.SymInt) or isinstance(v, bool):
            continue
        expr = v.node.expr
        if expr.is_Integer or expr in carried or expr in seen or expr.free_symbols <= carried:
            continue  # static, or computable from the tensors' dims
        seen.add(expr)
        out.append(i)
    return out


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


def static_or_none(d: Any) -> int | None:
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Integer", False):
        return int(d.node.expr)
    return None


def static_ints(vs: Any, what: str) -> list[int]:
    return [static_int(v, what) for v in vs]


def shape_of(val: torch.Tensor) -> list:
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


def result_dtype(*operands: Any) -> torch.dtype:
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


def dense_order(sizes: Sequence[int], strides: Sequence[int]) -> Optional[tuple]:
    """The dim order p (outermost first) in which a tensor of these sizes and strides fills its
    memory without gaps or overlap, so that `t.permute(p)` is contiguous; None when it does not.
    Dims of one element, whose stride says nothing, stay in their places among equal strides."""
    order = tuple(sorted(range(len(sizes)), key=lambda d: (-strides[d], d)))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1:
            if strides[d] != expected:
                return None
            expected *= sizes[d]
    return order


def memory_order(t: Any) -> Optional[tuple]:
    """The dim order p in which tensor `t`'s memory is laid out (so that `t.permute(p)` is
    contiguous), when `t` is a dense but non-contiguous view with static sizes and strides: a
    transposed activation that a training forward saved for its backward, a channels-last
    image. None when `t` is contiguous, overlapping or strided with gaps, empty, or has a
    symbolic size or stride."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        return None
    sizes, strides = tuple(t.shape), tuple(t.stride())
    if not all(type(v) is int for v in sizes + strides) or 0 in sizes:
        return None
    order = dense_order(sizes, strides)
    if order is None:
        return None
    moved = [d for d in order if sizes[d] != 1]
    return order if moved != sorted(moved) else None


def inverse_order(order: tuple) -> list:
    """The permutation that undoes `order`: t.permute(order).permute(inverse_order(order)) is t."""
    back = [0] * len(order)
    for i, d in enumerate(order):
        back[d] = i
    return back


class Lowerer:
    """Emits engine nodes for FX nodes into `graph` (a C.Graph).

    Nodes are lowered on demand (`value(node)`): a node no engine op consumes is never emitted,
    which lets e.g. addmm(b, x, permute(w)) become linear(x, w) without a dead transpose.
    The partitioner's probe of one node (support.py) is a subclass that binds what the node
    reads as graph inputs (`_unbound`) and takes every symbol as carried (`_missing_symbols`).
    """

    def __init__(self, graph: Any) -> None:
        self.g = graph
        self.env: dict[fx.Node, Any] = {}
        self._origin = ""  # the FX node being lowered (provenance, see lower())
        self._stamped: set[int] = set()  # engine values whose origin is set
        self._scalars: dict[tuple, int] = {}
        self._n_consts = 0
        self._n_inputs = 0
        # Dynamic sizes. The engine binds a symbol from an input dim that is exactly that
        # symbol, so sizes are written over the symbols some input carries plainly (`syms`).
        # An input dim that is an expression over symbols no input carries (s0*s1 after a
        # flatten that ran in PyTorch) becomes an opaque engine symbol (`opaque`: expr -> name),
        # bound from that dim, and later sizes that contain the expression use the name.
        self.syms: set[str] = set()
        self.opaque: dict = {}
        # Size inputs (declare_sizes): (engine input name, symbol it binds), and symbols no
        # input carries written through a size input's symbol (s0 -> e_0 - 1 for e_0 = s0 + 1).
        self._sizes: list[tuple[str, str]] = []
        self.solved: dict = {}
        self._size_vids: dict = {}  # dim text -> engine i64 scalar holding it (size_value)

    # -- dynamic sizes
    def declare_sizes(self, names: list[str], vals: list) -> None:
        """Declares size inputs (the scalar inputs `size_input_exprs` chose; SymInts) by their
        placeholder names; call after declare_inputs and before any size is written, then
        add_size_inputs after the tensor inputs are bound. A plain symbol binds itself. An
        expression binds an opaque symbol that later sizes containing it use; when it is a
        symbol plus an offset (a cache position s0 + 1), that symbol is written through it."""
        import sympy

        pending = []  # (expression, the symbol bound to it)
        for name, v in zip(names, vals):
            expr = meta(v).node.expr
            if expr.is_Symbol:
                self.syms.add(expr.name)
                self._sizes.append((name, expr.name))
                continue
            sym = self.opaque.setdefault(expr, f"e_{len(self.opaque)}")
            self._sizes.append((name, sym))
            pending.append((expr, _engine_symbol(sym)))
        # Solve e = c*s + rest (c = +-1) for a symbol s no input carries, once the rest is known:
        # pos - w + 1 and pos + 1 give pos, then w. Repeated until nothing more is solved.
        progress = True
        while pending and progress:
            progress = False
            for item in list(pending):
                expr, e = item
                expr = expr.xreplace(self.solved)
                free = [f for f in expr.free_symbols
                        if f.name not in self.syms and f not in self.solved and f.name not in self.opaque.values()]
                if len(free) != 1:
                    continue
                s = free[0]
                try:
                    c = sympy.diff(expr, s)
                    rest = sympy.expand(expr - c * s)
                except (TypeError, ValueError, AttributeError):  # floor division, max: not solved
                    continue
                if c in (1, -1) and not rest.has(s):
                    self.solved[s] = sympy.expand(c * (e - rest))
                    pending.remove(item)
                    progress = True

    def add_size_inputs(self) -> None:
        """The declared size inputs as engine inputs, after the tensor inputs (the call order)."""
        for name, sym in self._sizes:
            try:
                self._size_vids[sym] = self.g.add_size_input(name, sym)
            except load_c().UpdraftError as e:
                raise Unsupported(f"size input {name} = {sym}: {e}") from None
            self._n_inputs += 1

    def size_value(self, d: Any) -> int:
        """Size `d` (int or SymInt) as an engine i64 scalar: a constant when static, the size
        input that binds it, or else counted at run time (a sum of ones over [d]: O(d), for
        sizes such as an indexed dim's, which wraps negative indices)."""
        n = static_or_none(d)
        if n is not None:
            return self.scalar(n, torch.int64)
        text = self.dim(d)
        vid = self._size_vids.get(text)
        if vid is None:
            one = self.emit1("reshape", [self.scalar(1, torch.int64)], shape=[1])
            vid = self.emit1("sum", [self.emit1("expand", [one], shape=[text])], dims=[0])
            self._size_vids[text] = vid
        return vid

    def declare_inputs(self, vals: list) -> None:
        """Records the symbols the runtime inputs (FakeTensors) carry as plain dims; call before
        bind_input so an input's expression dims can refer to symbols of later inputs."""
        for v in vals:
            if isinstance(v, torch.Tensor):
                for d in v.shape:
                    if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                        self.syms.add(d.node.expr.name)

    def dim(self, d: Any) -> int | str:
        """Size `d` (int, SymInt or SymInt-valued FX node) as engine dim text over this graph's
        input symbols; Unsupported when it uses a symbol no engine input carries."""
        import sympy

        expr = sym_expr(d)
        if expr.is_Integer:
            return int(expr)
        if self.opaque:
            expr = expr.xreplace({k: _engine_symbol(v) for k, v in self.opaque.items()})
        if self.solved:
            expr = sympy.expand(expr.xreplace(self.solved))
        missing = sorted(s.name for s in expr.free_symbols
                         if s.name not in self.syms and s.name not in self.opaque.values())
        if missing:
            self._missing_symbols(expr, missing)
        return dim_text(expr)

    def _missing_symbols(self, expr: Any, missing: list[str]) -> None:
        raise Unsupported(f"size {expr} uses {', '.join(missing)}, which no input of this engine "
                          "graph has as a dim")

    def dims(self, ds: Any) -> list:
        return [self.dim(d) for d in ds]

    def _input_shape(self, val: torch.Tensor) -> list:
        shape: list = []
        for d in val.shape:
            expr = sym_expr(d)
            if expr.is_Integer:
                shape.append(int(expr))
            elif expr.is_Symbol:
                self.syms.add(expr.name)
                shape.append(expr.name)
            else:
                try:
                    shape.append(self.dim(d))
                except Unsupported:
                    name = self.opaque.setdefault(expr, f"e_{len(self.opaque)}")
                    shape.append(name)
        return shape

    # -- binding values
    def bind_input(self, node: fx.Node, name: str | None = None, order: Optional[tuple] = None) -> int:
        """Input `node` as a new engine input. With `order` (memory_order of its tensor), the
        engine input is the tensor in its memory's order (`t.permute(order)`, which the caller
        passes) and the node's value a permute of it back: a transposed view arrives without a
        copy, and the engine reads it through the permute (a matmul in place, fold_transpose_matmul)
        or copies it where a kernel needs it, with the arena's liveness, not for the whole call."""
        val = meta(node)
        dtype, _ = tensor_type(val)
        shape = self._input_shape(val)
        if order is not None:
            shape = [shape[d] for d in order]
        try:
            vid = self.g.add_input(name or f"in{self._n_inputs}", dtype, shape)
        except load_c().UpdraftError as e:
            raise Unsupported(f"input {node.name} {dtype}{shape}: {e}") from None
        self._n_inputs += 1
        if order is not None:
            vid = self.emit1("permute", [vid], dims=inverse_order(order))
        self.env[node] = vid
        return vid

    def constant(self, t: torch.Tensor, name: str | None = None, source: int = -1) -> int:
        """An engine constant sharing `t`'s memory. source >= 0: `t` is the partition's input
        number `source`, a parameter (compile-cache entries refer to it instead of storing it)."""
        t = t.detach()
        if t.device.type != "cpu":
            raise Unsupported(f"constant on device {t.device}")
        if not t.is_contiguous():
            t = t.contiguous()
        vid = self.g.add_constant(name or f"const{self._n_consts}", t, source)
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
            vid = self._unbound(arg)
        if isinstance(vid, list):
            raise Unsupported(f"{arg.name} has several outputs; expected one tensor")
        return vid

    def _unbound(self, node: fx.Node) -> Any:
        """The value of a node nothing has bound or lowered yet: a call is lowered now; anything
        else (a placeholder) should have been bound as an input or a constant."""
        if node.op != "call_function":
            raise Unsupported(f"value {node.name} is not bound in the engine graph")
        return self.lower(node)

    def operand(self, arg: Any, dtype: torch.dtype) -> int:
        """A tensor node cast to `dtype`, or a Python scalar as a 0-d constant of `dtype`."""
        if isinstance(arg, fx.Node) and isinstance(meta(arg), torch.SymInt):
            return self.cast(self.size_value(meta(arg)), dtype)  # a size used as a number (pos + 1)
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
        """Adds engine op `op`; Unsupported (with the engine's reason) when the engine cannot
        take it or has no CPU kernel for it. The op's shape function runs once, in add_node,
        which validates exactly what C.check_op would; only the kernel question is left, and
        its answer depends on the op and dtypes alone, so it is asked once per process."""
        C = load_c()
        if op not in _engine_op_names():
            raise Unsupported(f"engine op {op}: the engine has no op '{op}'")
        try:
            outs = list(self.g.add_node(op, list(inputs), attrs))
        except C.UpdraftError as e:
            raise Unsupported(f"engine op {op}: {e}") from None
        types = [self.g.value_type(i) for i in inputs]
        key = (op, tuple(d for d, _ in types))
        if key not in _kernel_verdicts:
            # add_node has just accepted these inputs, so check_op's shape check passes and its
            # answer is the kernel's.
            _kernel_verdicts[key] = C.check_op(op, [(d, list(s)) for d, s in types], attrs)
        reason = _kernel_verdicts[key]
        if reason is not None:
            raise Unsupported(f"engine op {op}: {reason}")
        return outs

    def emit1(self, op: str, inputs: list[int], **attrs: Any) -> int:
        return self.emit(op, inputs, **attrs)[0]

    def cast(self, vid: int, dtype: torch.dtype) -> int:
        if self.dtype_of(vid) == dtype:
            return vid
        return self.emit1("cast", [vid], dtype=engine_dtype(dtype))

    def reshape(self, vid: int, shape: list) -> int:
        """Reshape to `shape` (ints or SymInts). Dynamic sizes go to the engine as symbolic
        dims ([s0, s1, 12, 64]), written as torch has them, so one engine graph serves every
        size and later ops see the same expressions torch does."""
        cur = self.vtype(vid)[1]
        target = self.dims(shape)
        if target == cur:
            return vid
        return self.emit1("reshape", [vid], shape=target)

    # -- one node
    def lower(self, node: fx.Node) -> Any:
        """Lowers one call_function node; returns its id (or list of ids) and records it."""
        fn = lowering_for(node.target)
        if fn is None:
            raise Unsupported(f"no lowering for {op_name(node)}")
        # Provenance (Node::origin, Value::origin; updraft/debug/): engine nodes made while
        # lowering `node` come from it; a nested lower() stamps its own node, then ours again.
        outer = self._origin
        self._origin = node.name
        self.g.set_origin([node.name])
        try:
            out = fn(self, node, bind_args(node) if hasattr(node.target, "_schema") else {})
            out = self._conform(node, out)
        finally:
            self._origin = outer
            self.g.set_origin([outer] if outer else [])
        self._stamp_values(node, out)
        self.env[node] = out
        return out

    def _stamp_values(self, node: fx.Node, out: Any) -> None:
        """Names `node` as the origin of the engine values holding its results, unless a value
        already holds an earlier node's (a view lowered to its input). Output k of a node with
        several is named "node[k]" (the FX getitem that reads it)."""
        outs = out if isinstance(out, list) else [out]
        for k, vid in enumerate(outs):
            if vid is not None and vid not in self._stamped:
                self._stamped.add(vid)
                self.g.set_value_origin(vid, node.name if not isinstance(out, list) else f"{node.name}[{k}]")

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
# The op table, filled by the `register` decorator in the lowering_* modules.

LOWERINGS: dict[Any, Callable] = {}


def lowering_for(target: Any) -> Callable | None:
    """The lowering of `target`. Ops of libraries that may register after updraft is imported
    (transformers' custom ops) are keyed by their name, str(op): "transformers.x.default"."""
    fn = LOWERINGS.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = LOWERINGS.get(str(target))
    return fn


def register(*targets: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return deco


# Node helpers shared by the lowering rules.


def out_dtype(node: fx.Node) -> torch.dtype:
    val = meta(node)
    if isinstance(val, (list, tuple)):
        val = val[0]
    return val.dtype


def rank_of(node: fx.Node) -> int:
    return meta(node).dim()


def norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d
