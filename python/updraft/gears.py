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
padded rows of the outputs are cut off. A causal decoder padded at the end qualifies too. A model
that pools over the dim (mean over tokens), or normalises across it, does not: leave `pad` out.
The backend also refuses padding (and warns once) when an input carrying the dim has no pad
value, or an output has a size computed from the dim (s*12) that it cannot cut back.
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
    def bind(cls, gear: Gear, gm: Any, names: list, warn: Any) -> Optional["GearBox"]:
        import torch

        from .lowerer import meta

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        idx = [i for i, nm in enumerate(names) if _arg_name(nm) == gear.input]
        if not idx:
            warn(f"[updraft.gears] no model argument is called {gear.input!r} (arguments: "
                 f"{sorted({_arg_name(n) for n in names})}); the gear is ignored")
            return None
        v = meta(placeholders[idx[0]])
        if not isinstance(v, torch.Tensor) or not -v.dim() <= gear.dim < v.dim():
            warn(f"[updraft.gears] {gear.input!r} has no dim {gear.dim}; the gear is ignored")
            return None
        size = v.shape[gear.dim]
        if not isinstance(size, torch.SymInt):
            warn(f"[updraft.gears] dim {gear.dim} of {gear.input!r} is static ({size}); compile with "
                 "dynamic=True or torch._dynamo.mark_dynamic for gears; the gear is ignored")
            return None
        sym = str(size)
        carriers, padding, why = [], gear.pad is not None, ""
        for i, ph in enumerate(placeholders):
            m = meta(ph)
            if isinstance(m, torch.SymInt) and str(m) == sym:
                carriers.append((i, None, None))
            elif isinstance(m, torch.Tensor):
                dims = [d for d, s in enumerate(m.shape) if str(s) == sym]
                mixed = [d for d, s in enumerate(m.shape) if sym in str(s) and str(s) != sym]
                if mixed:
                    padding, why = False, f"input {names[i]} has a size computed from {sym}"
                for d in dims:
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
        if gear.pad is not None and not padding:
            warn(f"[updraft.gears] padding for {gear.input!r} dim {gear.dim} is off: {why}; sizes between "
                 "gears get plans of their own")
        return cls(gear, sym, carriers, outputs, padding)

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
