"""CompilerConfig: every knob of the updraft backend, validated when built.

    from updraft import CompilerConfig, get_backend
    torch.compile(model, backend=get_backend(CompilerConfig(num_threads=4, fallback=False)))

`torch.compile(model, backend="updraft", options={...})` takes the same keys.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional

_DEBUG_ENV = "UPDRAFT_DEBUG"
_CONV_LAYOUT_ENV = "UPDRAFT_CONV_LAYOUT"
# conv_layout -> the engine's channel_block option (-1: the block this CPU's kernels prefer).
_CONV_LAYOUTS = {"auto": -1, "nchw": 0}


def _debug_from_env() -> int:
    raw = os.environ.get(_DEBUG_ENV, "0").strip() or "0"
    try:
        level = int(raw)
    except ValueError:
        raise ValueError(f"[updraft.config] {_DEBUG_ENV}={raw!r} is not an integer; use 0, 1 or 2") from None
    if level not in (0, 1, 2):
        raise ValueError(f"[updraft.config] {_DEBUG_ENV}={level} is out of range; use 0, 1 or 2")
    return level


@dataclasses.dataclass(frozen=True)
class CompilerConfig:
    """Options of the updraft torch.compile backend.

    freeze: inference graphs treat parameters and buffers as engine constants (folded, prepacked).
        A call that passes different parameter tensors (another module instance) or tensors that
        were modified in place rebuilds the engine graph with the new values.
    fold_constants / fuse / num_threads: passed to the engine compiler (num_threads=0: engine default).
    debug: 0 quiet, 1 print a summary per compiled graph, 2 also print engine IR and pass log.
        Defaults to the environment variable UPDRAFT_DEBUG.
    fallback: on an engine error, warn once and run that graph eagerly (True) or raise (False).
    min_partition_size: engine partitions with fewer compute ops than this run eagerly instead.
    partition_cost: apply the cost rule (updraft/partition_cost.py): a partition whose estimated
        saving per call does not cover its boundary (engine call, outputs, input copies) runs in
        PyTorch, with both figures in `explain`. False keeps every supported partition.
    eager_ops: aten op names (e.g. "aten.gelu.default" or "aten.gelu") always left to PyTorch.
    cache_dir: folder of the persistent compile cache (updraft/cache.py, docs/format.md). None:
        the environment variable UPDRAFT_CACHE_DIR, and no cache when that is unset; "" turns
        the cache off.
    cache_max_bytes: size bound of the cache folder; least recently used entries go first.
    recompile_limit: engine compiles allowed per graph after its first (Dynamo recompiling a
        graph for new static shapes or dtypes, or a rebuild after parameters changed). Past it,
        that graph runs in PyTorch, with a warning naming what changed.
    gears: updraft.Gear entries: sizes of a dynamic dim planned at compile time, with padding
        up to the next gear where the caller says it is safe (updraft/gears.py).
    conv_layout: activation layout between convolutions. "auto" (default): channel-blocked
        (nChw16c with AVX-512, nChw8c with AVX2) through conv chains, so oneDNN runs its direct
        kernels, with reorders where a plain op reads them (src/passes/block_conv_layout.h);
        "nchw": plain NCHW everywhere (oneDNN's gemm-based convolution). Defaults to the
        environment variable UPDRAFT_CONV_LAYOUT, else "auto".
    """

    freeze: bool = True
    fold_constants: bool = True
    fuse: bool = True
    num_threads: int = 0
    debug: int = dataclasses.field(default_factory=_debug_from_env)
    fallback: bool = True
    min_partition_size: int = 1
    partition_cost: bool = True
    eager_ops: tuple = ()
    cache_dir: Optional[str] = None
    cache_max_bytes: int = 1 << 30
    recompile_limit: int = 8
    gears: tuple = ()
    conv_layout: str = dataclasses.field(default_factory=lambda: os.environ.get(_CONV_LAYOUT_ENV, "auto"))

    def __post_init__(self) -> None:
        for name in ("freeze", "fold_constants", "fuse", "fallback", "partition_cost"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"[updraft.config] {name} must be a bool, got {type(value).__name__} {value!r}")
        for name, low in (("num_threads", 0), ("min_partition_size", 1), ("debug", 0),
                          ("cache_max_bytes", 0), ("recompile_limit", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"[updraft.config] {name} must be an int, got {type(value).__name__} {value!r}")
            if value < low:
                raise ValueError(f"[updraft.config] {name}={value} must be >= {low}")
        if self.conv_layout not in _CONV_LAYOUTS:
            raise ValueError(f"[updraft.config] conv_layout={self.conv_layout!r} is not one of "
                             f"{sorted(_CONV_LAYOUTS)} (also checked when it comes from {_CONV_LAYOUT_ENV})")
        if self.debug > 2:
            raise ValueError(f"[updraft.config] debug={self.debug} is out of range; use 0, 1 or 2")
        if self.cache_dir is not None:
            if isinstance(self.cache_dir, os.PathLike):
                object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
            if not isinstance(self.cache_dir, str):
                raise TypeError(f"[updraft.config] cache_dir must be a path or None, got "
                                f"{type(self.cache_dir).__name__} {self.cache_dir!r}")
        from .gears import Gear

        gears = self.gears
        if isinstance(gears, Gear):
            gears = (gears,)
        if not all(isinstance(g, Gear) for g in gears):
            raise TypeError(f"[updraft.config] gears must be a sequence of updraft.Gear, got {self.gears!r}")
        object.__setattr__(self, "gears", tuple(gears))
        ops = self.eager_ops
        if isinstance(ops, str) or not all(isinstance(o, str) for o in ops):
            raise TypeError("[updraft.config] eager_ops must be a sequence of op names such as ('aten.gelu.default',)")
        object.__setattr__(self, "eager_ops", tuple(ops))

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> "CompilerConfig":
        """Builds a config from torch.compile(options=...) keys; unknown keys are an error."""
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"[updraft.config] unknown option(s) {unknown}; valid options are {sorted(known)}")
        return cls(**options)

    def cache_options(self) -> dict:
        """The options that change the optimised graph (part of every compile-cache key)."""
        return {"fold_constants": self.fold_constants, "fuse": self.fuse, "conv_layout": self.conv_layout}

    def engine_options(self) -> dict:
        """The options dict that updraft._C.compile accepts."""
        return {"fold_constants": self.fold_constants, "fuse": self.fuse,
                "num_threads": self.num_threads, "debug": self.debug,
                "channel_block": _CONV_LAYOUTS[self.conv_layout]}
