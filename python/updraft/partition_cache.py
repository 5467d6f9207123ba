"""The persistent compile cache as an engine partition uses it: its key, loading its entry,
storing a new one (the cache itself, folder and format: cache.py, docs/format.md).

Each function takes the EnginePartition (engine_partition.py) whose build asks, and records
what happened in its report (hit, miss, rebuilt, stored). It does not lower or compile: on a
miss or an unusable entry the partition compiles as without the cache.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import torch

from .cache import DiskCache, cache_for, entry_params, partition_key
from .lowering import Unsupported, meta
from .report import count_cache_event, warn_once


def _c():
    from . import _C
    return _C


def key_for(part: Any, args: tuple, placeholders: list, size_pos: list[int], orders: dict) -> tuple:
    """(DiskCache, key, EntryParams), or (None, None, None) when the cache is off or unusable.
    `orders`: the runtime inputs taken in their memory order (engine_partition.input_orders)."""
    try:
        disk = cache_for(part.config)
    except OSError as e:
        warn_once(f"{e}; compiling without the cache")
        part.report.cache = f"off: {e}"
        return None, None, None
    if disk is None:
        return None, None, None
    C = _c()
    inputs = []
    for j in part._other_pos:
        arg, ph = args[j], placeholders[j]
        if j in size_pos:  # bound by value: its place among the engine's inputs matters
            inputs.append((j, "size", meta(ph)))
        elif not isinstance(arg, torch.Tensor):
            inputs.append((j, "other", meta(ph) if "val" in ph.meta else type(arg).__name__))
        elif part.const_kinds[j] == "literal":
            inputs.append((j, "literal", arg))
        else:
            inputs.append((j, "runtime", (meta(ph), orders.get(j))))
    # The parameters in one engine pass: their key text here, their pointers for the load.
    params = entry_params(args, part._param_pos)
    # The engine by its version and its pass pipeline: an entry optimised by another pipeline
    # (a pass added or removed within one version) is a miss, not a graph without the new pass.
    engine = f"{C.engine_version()} passes {','.join(C.pass_names())}"
    key = partition_key(part.sub.code, inputs, params.text, part.config.cache_options(), engine, C.cpu_features())
    return disk, key, params


def load(part: Any, disk: DiskCache, key: str, params: Any, args: tuple, runtime_pos: list[int],
         size_pos: list[int], t0: float) -> Optional[tuple]:
    """(compiled graph, output dtypes) from the entry for `key`, or None on a miss or an
    unusable entry (which is removed: it would fail every later process too)."""
    C = _c()
    path = disk.lookup(key)
    if path is None:
        part.report.cache = "miss"
        count_cache_event("miss")
        return None
    try:
        cg, info = C.load_entry_file(str(path), key, params, part.config.engine_options())
        out_dtypes = part._check_out_dtypes(cg.output_dtypes())
    except Exception as e:  # whatever the failure, the entry would fail every later process too
        why = str(e) if isinstance(e, (C.UpdraftError, Unsupported)) else f"{type(e).__name__}: {e}"
        warn_once(f"[updraft.cache] entry {path} is unusable ({why}); removing it and "
                  "compiling again")
        disk.discard(key)
        part.report.cache = f"rebuilt: {why}"
        count_cache_event("rebuilt")
        return None
    report = part.report
    report.cache = "hit"
    # Folded constants: taken from the entry (same weights; "mapped", from when entries were)
    # or replayed (a new checkpoint).
    if info["folded"]:
        report.cache_folds = "mapped" if info["mapped"] else "replayed"
    count_cache_event("hit")
    report.engine_compiles += 1
    report.lower_ms = 0.0
    report.compile_ms = cg.compile_ms
    report.cache_ms = (time.perf_counter() - t0) * 1e3
    report.num_inputs = len(runtime_pos) + len(size_pos)
    report.num_constants = params.tensors + sum(
        1 for j in part._other_pos if part.const_mask[j] and isinstance(args[j], torch.Tensor))
    return cg, out_dtypes


def store(part: Any, disk: DiskCache, key: str, cg: Any) -> None:
    """Stores the entry on a background thread (updraft/cache.py); the report says "stored"
    once it is written. The engine graph is immutable once compiled, so serialising it while
    the caller runs it is safe."""
    C = _c()
    report = part.report
    note = f"{report.name}: {report.num_ops} ops"
    # Folded values are stored when they take at most a quarter of the cache's bound.
    make = lambda: C.save_entry(cg, key, note, max_folded_bytes=disk.max_bytes // 4)  # noqa: E731

    def done(err: Optional[BaseException]) -> None:
        if err is None:
            report.cache += ", stored"
            return
        why = str(err) if isinstance(err, (OSError, C.UpdraftError)) else f"{type(err).__name__}: {err}"
        warn_once(f"[updraft.cache] could not store the compiled {report.name} in {disk.root}: {why}")
        report.cache += f", not stored: {why}"

    disk.put_async(key, make, done)
