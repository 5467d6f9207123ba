"""Split an aten graph into engine partitions and eager PyTorch.

`partition_graph(gm, ...)` asks EngineSupport (support.py) about every node, groups the
supported ones with torch's CapabilityBasedPartitioner, keeps the groups worth a trip to the
engine (min_partition_size, the cost rule of partition_cost.py) and replaces each by an
`EnginePartition` module (engine_partition.py, which builds and runs it). Unsupported nodes
stay in the outer GraphModule and run eagerly.
"""
from __future__ import annotations

import collections
import operator
import time
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from . import partition_cost
from .config import CompilerConfig
from .engine_partition import EnginePartition
from .lowering import is_compute, is_shape_arithmetic, meta, op_name
from .report import GraphReport, PartitionReport
from .support import EngineSupport

PREFIX = "updraft_partition_"


def partition_graph(gm: fx.GraphModule, config: CompilerConfig, report: GraphReport,
                    frozen: set[int]) -> tuple[fx.GraphModule, list[EnginePartition]]:
    """Fuses engine-supported nodes of `gm` into EnginePartition submodules, in place.

    `frozen` holds the indices of gm's placeholders that become engine constants.
    """
    t0 = time.perf_counter()
    support = EngineSupport(config)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    proposed = partitioner.propose_partitions()
    # By name: fuse_partitions re-creates the graph's nodes (stable_topological_sort).
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    frozen_names = {placeholders[i].name for i in frozen if i < len(placeholders)}
    views_left = _leave_views_to_pytorch(proposed)
    kept, left = _keep_paying_partitions(gm, proposed, config, frozen_names, report)
    in_engine = {n for p in kept for n in p.nodes}
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n in in_engine:
            report.add_engine(op_name(n), is_compute(n))
        elif is_shape_arithmetic(n):
            report.add_shape_arithmetic()
        elif n in views_left and n not in left:
            report.add_free_view()
        else:
            reason = support.reason(n) or left.get(n) or views_left.get(n, "its partition was not kept")
            report.add_fallback(op_name(n), reason, is_compute(n), node=n.name)
    engine_parts: list[EnginePartition] = []
    if kept:
        gm = partitioner.fuse_partitions(kept, prefix=PREFIX)
        for node in list(gm.graph.nodes):
            if node.op != "call_module" or not str(node.target).startswith(PREFIX):
                continue
            sub = getattr(gm, node.target)
            subs_ph = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for ph, src in zip(subs_ph, node.args):
                if "val" not in ph.meta and isinstance(src, fx.Node):
                    ph.meta["val"] = meta(src)
            const_kinds = [("param" if src.op == "placeholder" and src.name in frozen_names
                            else "literal" if src.op == "get_attr" else None)
                           if isinstance(src, fx.Node) else None for src in node.args]
            body = [n for n in sub.graph.nodes if n.op == "call_function"]
            prep = PartitionReport(str(node.target), len(body), sum(1 for n in body if is_compute(n)),
                                   ops=[(op_name(n), is_compute(n)) for n in body], graph=report)
            report.partitions.append(prep)
            prep.compact_weights = _compact_weights(sub, const_kinds)
            part = EnginePartition(sub, const_kinds, config, prep)
            setattr(gm, node.target, part)
            engine_parts.append(part)
    if engine_parts:
        views_to_reshapes(gm)
    report.partition_ms = (time.perf_counter() - t0) * 1e3
    return gm, engine_parts


# The casts a widening is written with (QuantizedLinear.forward's bf16 `qweight.to(float32)`).
_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _compact_weights(sub: fx.GraphModule, const_kinds: list) -> int:
    """How many of the partition's frozen parameters are int8 or bf16 weights that it widens to
    float32 or multiplies through `aten._weight_int8pack_mm`: the model stores them compactly
    itself (updraft.quantize_weights), and the engine reads them in place (linear_wq)."""
    n = 0
    phs = [p for p in sub.graph.nodes if p.op == "placeholder"]
    for ph, kind in zip(phs, const_kinds):
        val = ph.meta.get("val")
        if kind != "param" or not isinstance(val, torch.Tensor) or val.dtype not in (torch.int8, torch.bfloat16):
            continue
        if any(u.op == "call_function" and (u.target is torch.ops.aten._weight_int8pack_mm.default or (
                u.target in _CASTS and isinstance(u.meta.get("val"), torch.Tensor)
                and u.meta["val"].dtype == torch.float32)) for u in ph.users):
            n += 1
    return n


def _leave_views_to_pytorch(proposed: list) -> dict:
    """Takes out of each partition the views (permute, transpose, expand, reshape...) whose users
    all run in PyTorch: there a view is free, while an engine output is a copy (a frozen
    weight's transpose feeding a PyTorch matmul was copied on every call). Returns the reason
    for each node taken out."""
    left = {}
    for p in proposed:
        changed = True
        while changed:  # taking a view out may leave its own input view with no user inside
            changed = False
            for n in list(p.nodes):
                if (n.target is not operator.getitem and not is_compute(n) and n.users
                        and all(u not in p.nodes for u in n.users)):
                    p.remove_node(n)
                    left[n] = "a view whose users all run in PyTorch stays a free view there"
                    changed = True
    return left


def _keep_paying_partitions(gm: fx.GraphModule, proposed: list, config: CompilerConfig,
                            frozen_names: set, report: GraphReport) -> tuple[list, dict]:
    """The proposed partitions worth a trip to the engine, and for the nodes of the others the
    reason they stay in PyTorch (min_partition_size, then the cost rule of partition_cost.py).

    The cost rule judges partitions between PyTorch islands. A graph that is one partition
    and nothing else has no island: its one engine call replaces the runtime wrapper PyTorch
    would run the graph under (measured no slower even for a single op; docs/BENCHMARKS.md)."""
    in_parts = {n for p in proposed for n in p.nodes}
    whole = len(proposed) == 1 and not any(
        is_compute(n) for n in gm.graph.nodes if n.op == "call_function" and n not in in_parts)
    kept, left = [], {}
    for p in proposed:
        n_compute = sum(1 for n in p.nodes if is_compute(n))
        if n_compute == 0 or n_compute < config.min_partition_size:
            why = "its partition has fewer compute ops than CompilerConfig.min_partition_size"
        elif config.partition_cost and not whole and not (est := partition_cost.estimate(p.nodes, frozen_names)).pays:
            why = f"its engine partition would not pay for its boundary: {est.why()}"
            report.cost_notes.append(f"{n_compute} compute op(s) ({_op_list(p.nodes)}) left to "
                                     f"PyTorch: {est.why()}")
        else:
            kept.append(p)
            continue
        for n in p.nodes:
            left[n] = why
    return kept, left


def _op_list(nodes: Any, most: int = 4) -> str:
    names = collections.Counter(op_name(n) for n in nodes if is_compute(n))
    text = ", ".join(f"{op} x{c}" for op, c in names.most_common(most))
    return text + (", ..." if len(names) > most else "")


def views_to_reshapes(gm: fx.GraphModule) -> None:
    """Eager `view`s may read engine outputs, which are contiguous where torch's were not (e.g.
    attention output [B,H,L,E] stored as [B,L,H,E]); reshape is a view when strides allow and a
    copy otherwise, so it computes the same values for any input layout."""
    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in views:
            n.target = torch.ops.aten.reshape.default
            changed = True
    if changed:
        gm.recompile()
