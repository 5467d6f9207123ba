"""Gears: a few sizes of one dynamic dim, planned at compile time, that other sizes pad up to.

    gear = updraft.Gear("input_ids", dim=1, sizes=(128, 256, 512),
                        pad={"input_ids": 0, "attention_mask": 0})
    backend = updraft.get_backend(updraft.CompilerConfig(gears=(gear,)))
    model = torch.compile(model, backend=backend, dynamic=True)

`input` names the model's argument (Dynamo's placeholder `L_<name>_`) and `dim` the dim whose
sizes the gears list; it must be dynamic (dynamic=True, mark_dynamic, or automatic dynamic).
At the first call every gear's plans are built (the model runs once per gear on the first call's
inputs padded or cut to that size). A later call whose size lies between gears is padded up to
the next gear when `pad` is given, and its outputs are cut back; otherwise, or above the largest
gear, it gets a plan of its own (fast: plans over one compile reuse its kernels).

When padding is safe (the caller vouches for it by giving `pad`): every input that carries the
dim is listed in `pad` with a value that makes padded positions inert, and no output mixes
positions along the dim except through attention that those values mask out. For a BERT-style
encoder, input_ids padded with the pad token and attention_mask padded with 0 qualify: padded
keys get the mask's large negative bias, so real positions attend to real positions only, and
padded rows of the outputs are cut off. A causal decoder padded at the end qualifies too, when it returns every position. A model
that pools over the dim (mean over tokens), or normalises across it, does not: leave `pad` out.
The backend also refuses padding (and warns once) when an input carrying the dim has no pad
value, an output has a size computed from the dim (s*12) that it cannot cut back, or the graph
takes positions counted from the end of the dim (transformers' logits_to_keep keeps the last
position's logits; padding at the end would move it).

KV caches: the gear is refused for a graph (one warning: drop the gear, range plans already give
one plan per size bucket) where resizing the geared input alone would break it: another input's
size is computed from the dim, a shape guard ties the dim to another input's size (a decode
step's attention mask and cache, a static cache's max_cache_len), or the graph writes a tensor in
place (a static cache). A one-token decode graph, where the dim is 1, just does not use the gear.
"""
from __future__ import annotations

import bisect
import dataclasses
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class Gear:
    input: str
    dim: int
    sizes: tuple
    pad: Optional[dict] = None

    def __post_init__(self) -> None:
        if not isinstance(self.input, str) or not self.input:
            raise TypeError(f"[updraft.config] Gear.input must be the model argument's name, got {self.input!r}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise TypeError(f"[updraft.config] Gear.dim must be an int, got {self.dim!r}")
        sizes = tuple(self.sizes)
        if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
            raise ValueError(f"[updraft.config] Gear.sizes must be positive ints, got {self.sizes!r}")
        object.__setattr__(self, "sizes", tuple(sorted(set(sizes))))
        if self.pad is not None:
            if not isinstance(self.pad, dict) or not all(isinstance(k, str) for k in self.pad):
                raise TypeError("[updraft.config] Gear.pad maps argument names to pad values, "
                                f"e.g. {{'input_ids': 0, 'attention_mask': 0}}; got {self.pad!r}")
            object.__setattr__(self, "pad", dict(self.pad))


def _arg_name(placeholder_name: str) -> str:
    """Dynamo's `L_input_ids_` -> `input_ids`; `l_kwargs_input_ids_` too."""
    n = placeholder_name
    if n[:2] in ("L_", "l_") and n.endswith("_"):
        n = n[2:-1]
    for prefix in ("kwargs_", "args_"):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return n


class GearBox:
    """One gear bound to a compiled inference graph: where the dim is, how to pad and cut."""

    def __init__(self, gear: Gear, symbol: str, carriers: list, outputs: list, padding: bool) -> None:
        self.gear = gear
        self.symbol = symbol
        self.carriers = carriers    # [(placeholder index, dim or None for a SymInt, pad value)]
        self.outputs = outputs      # per output: dims to cut (list), or None for a non-tensor
        self.padding = padding
        self.warmed = False

    @classmethod
    def bind(cls, gear: Gear, gm: Any, names: list, warn: Any, note: Any = None) -> Optional["GearBox"]:
        import torch

        from .lowerer import meta

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        idx = [i for i, nm in enumerate(names) if _arg_name(nm) == gear.input]
        if not idx:
            user = sorted({_arg_name(n) for n in names if "_parameters_" not in n and "_buffers_" not in n})
            warn(f"[updraft.gears] no model argument is called {gear.input!r} (arguments: {user}); "
                 "the gear is ignored")
            return None
        v = meta(placeholders[idx[0]])
        if not isinstance(v, torch.Tensor) or not -v.dim() <= gear.dim < v.dim():
            warn(f"[updraft.gears] {gear.input!r} has no dim {gear.dim}; the gear is ignored")
            return None
        size = v.shape[gear.dim]
        if not isinstance(size, torch.SymInt):
            if size == 1:  # a decode step (one new token): Dynamo specialises size 1, so no warning
                if note is not None:
                    note(f"{gear.input} dim {gear.dim} is 1 in this graph (a one-token decode step?): "
                         "the gear does not apply to it")
                return None
            warn(f"[updraft.gears] dim {gear.dim} of {gear.input!r} is static ({size}); compile with "
                 "dynamic=True or torch._dynamo.mark_dynamic for gears; the gear is ignored")
            return None
        sym = str(size)
        refusal = _refusal(gear, size, gm, placeholders, names)
        if refusal:
            warn(f"[updraft.gears] the gear on {gear.input!r} dim {gear.dim} is refused for this graph: "
                 f"{refusal}. The graph runs without the gear, correctly; drop the gear for KV-cache "
                 "models: range plans (CompilerConfig.range_plans) already give one plan per size bucket")
            return None
        carriers, padding, why = [], gear.pad is not None, ""
        for i, ph in enumerate(placeholders):
            m = meta(ph)
            if isinstance(m, torch.SymInt) and str(m) == sym:
                carriers.append((i, None, None))
            elif isinstance(m, torch.Tensor):
                for d in [d for d, s in enumerate(m.shape) if str(s) == sym]:
                    name = _arg_name(names[i])
                    value = (gear.pad or {}).get(name)
                    if value is None and padding:
                        padding, why = False, f"input {name!r} carries the dim but has no pad value"
                    carriers.append((i, d, value))
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outputs = []
        for o in (out if isinstance(out, (list, tuple)) else [out]):
            m = meta(o)
            if not isinstance(m, torch.Tensor):
                outputs.append(None)
                continue
            outputs.append([d for d, s in enumerate(m.shape) if str(s) == sym])
            if any(sym in str(s) and str(s) != sym for s in m.shape) and padding:
                padding, why = False, f"an output has a size computed from {sym}"
        if padding:
            end = _counts_from_end(gm, sym)
            if end:
                padding, why = False, end
        if gear.pad is not None and not padding:
            warn(f"[updraft.gears] padding for {gear.input!r} dim {gear.dim} is off: {why}; sizes between "
                 "gears get plans of their own")
        box = cls(gear, sym, carriers, outputs, padding)
        box._guard_code = _guard_code(size, placeholders)
        box._symbolic = [i for i, ph in enumerate(placeholders) if _is_symbolic(meta(ph))]
        box._fits = {}
        return box

    def fits(self, args: list) -> bool:
        """Whether `args` (resized) satisfy the graph's shape guards: the graph is valid for them.
        Evaluating the guards costs far more than a look-up (docs/BENCHMARKS.md, "Issue 20: gears"),
        so the answer is kept per sizes and strides of the inputs with symbolic sizes, the only
        ones the guards read."""
        code, env = getattr(self, "_guard_code", (None, None))
        if not code:
            return True
        key = tuple((tuple(a.shape), a.stride()) if hasattr(a, "shape") else a for a in
                    (args[i] for i in self._symbolic))
        hit = self._fits.get(key)
        if hit is None:
            try:
                hit = bool(env.evaluate_guards_expression(code, args))
            except Exception:  # an expression we cannot evaluate: do not run the graph on these sizes
                hit = False
            if len(self._fits) < 256:
                self._fits[key] = hit
        return hit

    def size_of(self, args: list) -> int:
        i, d, _ = next(c for c in self.carriers if c[1] is not None)
        return args[i].shape[d]

    def resized(self, args: list, target: int) -> list:
        """args with the dim padded (pad values) or cut to `target`."""
        import torch

        args = list(args)
        for i, d, value in self.carriers:
            if d is None:
                args[i] = target
                continue
            t = args[i]
            have = t.shape[d]
            if target <= have:
                args[i] = t.narrow(d, 0, target)
            else:
                shape = list(t.shape)
                shape[d] = target - have
                fill = torch.full(shape, value if value is not None else 0, dtype=t.dtype)
                args[i] = torch.cat([t, fill], dim=d)
        return args

    def gear_for(self, size: int) -> Optional[int]:
        """The gear a call of this size runs at, or None for its own plan."""
        sizes = self.gear.sizes
        if size in sizes or not self.padding:
            return None
        k = bisect.bisect_left(sizes, size)
        return sizes[k] if k < len(sizes) else None

    def cut(self, outs: Any, size: int) -> Any:
        single = not isinstance(outs, (list, tuple))
        seq = [outs] if single else list(outs)
        for k, dims in enumerate(self.outputs):
            if dims and k < len(seq):
                for d in dims:
                    seq[k] = seq[k].narrow(d, 0, size).contiguous()
        return seq[0] if single else type(outs)(seq) if isinstance(outs, tuple) else seq


def _all_nodes(gm: Any):
    """Nodes of the outer graph and of its partitions' subgraphs (the ops partitioning wrapped)."""
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if graph is not None:
            yield from graph.nodes


def _input_with(symbols: set, placeholders: list, names: list, skip: int) -> Optional[str]:
    """The first input (other than the geared one) whose size mentions one of `symbols`."""
    import torch

    from .lowerer import meta

    for want in (torch.Tensor, torch.SymInt):  # a tensor names the input better than its size does
        for i, ph in enumerate(placeholders):
            m = meta(ph)
            if i == skip or not isinstance(m, want):
                continue
            for s in (list(m.shape) if isinstance(m, torch.Tensor) else [m]):
                if isinstance(s, torch.SymInt) and s.node.expr.free_symbols & symbols:
                    name = _arg_name(names[i])
                    return name[len("l_kwargs_"):] if name.lower().startswith("l_kwargs_") else name
    return None


def _refusal(gear: Gear, size: Any, gm: Any, placeholders: list, names: list) -> str:
    """Why warming or padding this gear would be unsafe in this graph, or "".

    The gear resizes only the inputs whose dim is exactly its symbol. That breaks the graph when
    (a) another input's size is computed from the symbol (a mask of length s+1), (b) the shape
    guards tie the symbol to another input's size (a KV cache of length s87 with s16 <= s87 + 1,
    a static cache's max_cache_len > s27), or (c) the graph writes a tensor in place (a static
    cache's index_copy_): warming would run it on padded or cut inputs and write those."""
    import torch

    from .lowerer import meta

    gi = next(i for i, nm in enumerate(names) if _arg_name(nm) == gear.input)
    sym_expr = size.node.expr
    for i, ph in enumerate(placeholders):
        m = meta(ph)
        if isinstance(m, torch.Tensor):
            for s in m.shape:
                if isinstance(s, torch.SymInt) and sym_expr in s.node.expr.free_symbols and s.node.expr != sym_expr:
                    return (f"input {_arg_name(names[i])!r} has a size computed from it ({s}), which "
                            "resizing the geared dim alone would break")
    env = size.node.shape_env
    import sympy

    for g in env.guards:
        try:
            e = env.replace(g.expr)
        except Exception:
            e = g.expr
        if isinstance(e, sympy.Ne) or sym_expr not in getattr(e, "free_symbols", ()):
            continue
        others = {x for x in e.free_symbols if x != sym_expr}
        if not others:
            continue
        other = _input_with(others, placeholders, names, gi)
        if other is not None:
            return (f"the size of input {other!r} is tied to it ({e}: a KV cache?), so padding or "
                    f"cutting {gear.input!r} alone would run the graph on inconsistent sizes")
    for n in _all_nodes(gm):
        schema = getattr(n.target, "_schema", None)
        if n.op == "call_function" and schema is not None and schema.is_mutable:
            return (f"the graph writes a tensor in place ({n.target}: a static KV cache?), which "
                    "warming the gear on padded or cut inputs would overwrite")
    return ""


def _counts_from_end(gm: Any, sym: str) -> str:
    """Why padding at the end would change a result: the graph takes positions of the dim counted
    from its end (x[:, -1:], the last token's logits that transformers' logits_to_keep keeps), so
    a padded call would read a padded position. "" when it does not."""
    import torch

    from .lowerer import meta

    big = 2 ** 62
    for n in _all_nodes(gm):
        if n.op != "call_function" or n.target not in (torch.ops.aten.slice.Tensor, torch.ops.aten.select.int):
            continue
        x = meta(n.args[0]) if isinstance(n.args[0], torch.fx.Node) else None
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            continue
        dim = n.args[1] if len(n.args) > 1 else 0
        if not isinstance(dim, int) or sym not in str(x.shape[dim % x.dim()]):
            continue
        bounds = list(n.args[2:4]) if n.target is torch.ops.aten.slice.Tensor else list(n.args[2:3])
        for b in bounds:
            value = meta(b) if isinstance(b, torch.fx.Node) else b
            if (isinstance(value, int) and -big < value < 0) or (isinstance(value, torch.SymInt) and sym in str(value)):
                return (f"the graph takes positions counted from the end of the dim ({n.target}, bound "
                        f"{value}; e.g. logits_to_keep's last-token logits), which padding would move")
    return ""


def _guard_code(size: Any, placeholders: list) -> tuple:
    """The graph's shape guards as an expression over its inputs (ShapeEnv), for `GearBox.fits`."""
    from .lowerer import meta

    env = size.node.shape_env
    try:
        return env.produce_guards_expression([meta(p) for p in placeholders]), env
    except Exception:
        return None, None


def _is_symbolic(value: Any) -> bool:
    import torch

    if isinstance(value, torch.SymInt):
        return True
    return isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt)
                                                   for s in (*value.shape, *value.stride()))
