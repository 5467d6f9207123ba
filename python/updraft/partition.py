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
from typing import Any, Optional

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from . import partition_cost
from .config import CompilerConfig
from .engine_partition import EnginePartition
from .lowerer import dense_order
from .lowering import Unsupported, is_compute, is_shape_arithmetic, meta, op_name
from . import quantize  # noqa: F401  (defines torch.ops.updraft.linear_int4)
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
        restride_storage_reads(gm, inputs_too=False)
    report.partition_ms = (time.perf_counter() - t0) * 1e3
    return gm, engine_parts


# The casts a widening is written with (QuantizedLinear.forward's bf16 `qweight.to(float32)`).
_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


# The matmuls that read a compact weight as it is stored.
_COMPACT_MATMULS = (torch.ops.aten._weight_int8pack_mm.default, torch.ops.updraft.linear_int4.default)


def _compact_weights(sub: fx.GraphModule, const_kinds: list) -> int:
    """How many of the partition's frozen parameters are int8, int4 or bf16 weights that it widens
    to float32 or multiplies through `aten._weight_int8pack_mm` or `updraft::linear_int4`: the
    model stores them compactly itself (updraft.quantize_weights), and the engine reads them in
    place (linear_wq)."""
    n = 0
    phs = [p for p in sub.graph.nodes if p.op == "placeholder"]
    for ph, kind in zip(phs, const_kinds):
        val = ph.meta.get("val")
        if kind != "param" or not isinstance(val, torch.Tensor) or val.dtype not in (torch.int8, torch.uint8, torch.bfloat16):
            continue
        # The matmuls' weight (argument 1), not an int4 weight's bf16 scales (argument 2).
        if any(u.op == "call_function" and ((u.target in _COMPACT_MATMULS and u.args[1] is ph) or (
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


# -- Layouts that can be observed. An engine partition returns its results contiguous where
# torch's op may not have (attention's [B,H,L,E] result is stored [B,L,H,E] by torch), and eager
# ops after it keep that layout. Values are the same, but two things see the layout: the user,
# through a graph output's strides (`.view()` after a graph break raised where eager's worked),
# and storage reads (`as_strided` names strides and a storage offset outright, and read other
# elements than in eager, silently). Each gets the value at the root of its view chain (the last
# producer that is not a view) in its traced layout; the views after it then run in PyTorch and
# give eager's geometry exactly. `view` itself is made layout-proof by views_to_reshapes.

# Ops whose result depends on where their first argument's elements sit in its storage.
_STORAGE_READS = (torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default,
                  torch.ops.aten.as_strided_scatter.default)
# Namespaces whose ops depend on values only (or are storage reads above): a custom op (a
# torch.library op of the user's, a C++ extension's kernel) may read its inputs' memory as eager
# laid it out, so all its tensor arguments count as storage reads.
_VALUE_NAMESPACES = ("aten", "prims", "_c10d_functional", "_quantized", "quantized", "updraft")


def restride_storage_reads(gm: fx.GraphModule, inputs_too: bool) -> int:
    """Storage reads running in PyTorch get their root in its traced layout (above). With
    `inputs_too`, graph inputs not laid out plainly in the trace count as possibly relaid (a
    training backward's saved values come from the engine forward); without, inputs are the
    user's, which eager reads by their real storage. Returns the number of roots treated."""
    reads = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target in _STORAGE_READS and isinstance(n.args[0], fx.Node):
            reads.append((n, 0))
        elif n.target.namespace not in _VALUE_NAMESPACES:
            reads += [(n, k) for k, a in enumerate(n.args)
                      if isinstance(a, fx.Node) and isinstance(meta(a), torch.Tensor)]
    return _restride_roots(gm, reads, inputs_too, must=True) if reads else 0


def restride_outputs(gm: fx.GraphModule, outputs: Optional[range] = None) -> int:
    """The graph outputs at `outputs` (those the user sees; None: all) get eager's layout, as
    Inductor's do: their roots in their traced layout (above). Returns the number of roots
    treated."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else [out_node.args[0]]
    ks = range(len(flat)) if outputs is None else outputs
    return _restride_roots(gm, [(out_node, k) for k in ks if k < len(flat) and isinstance(flat[k], fx.Node)],
                           inputs_too=False, must=False)


def _restride_roots(gm: fx.GraphModule, readers: list, inputs_too: bool, must: bool) -> int:
    """For each (node, k) reading argument k (of output: its k-th value), walks the view chain
    back to its root; a root whose layout may differ from the trace (`_relaid`) gets a node that
    copies it into the traced layout when, at run time, it is not (a check per call). What it
    does not do: a root with symbolic geometry that is not dense from offset 0 cannot be
    rebuilt; it raises Unsupported if `must` (a storage read: the graph then runs in PyTorch,
    backend's fallback) and is left otherwise (an output: its values are right, its strides may not be)."""
    relaid = _relaid(gm, inputs_too)
    done: dict[fx.Node, fx.Node] = {}
    changed = False
    for node, k in readers:
        args = node.args[0] if node.op == "output" else node.args
        tree = list(args) if isinstance(args, (tuple, list)) else [args]
        first, root = None, tree[k]
        while root.op == "call_function" and isinstance(root.target, torch._ops.OpOverload) \
                and root.target.is_view and isinstance(root.args[0], fx.Node):
            first, root = root, root.args[0]
        if root not in relaid:
            continue
        if root not in done:
            done[root] = _restride_node(gm, root, must)
        if done[root] is None:
            continue
        if first is not None:
            first.replace_input_with(root, done[root])
        elif node.op == "output":
            tree[k] = done[root]
            node.args = (type(node.args[0])(tree) if isinstance(node.args[0], (tuple, list)) else tree[0],)
        else:
            node.replace_input_with(root, done[root])
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return sum(1 for v in done.values() if v is not None)


def _relaid(gm: fx.GraphModule, inputs_too: bool) -> set:
    """The nodes whose value may be laid out otherwise than in the trace: engine partition
    results not plain in the trace, inputs likewise (with `inputs_too`), and PyTorch ops reading
    any of those (eager ops keep their input's layout). A restride node's result is as traced."""
    relaid: set = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if inputs_too and not _plain(meta(n)):
                relaid.add(n)
        elif _engine_result(n):
            if not _plain(meta(n)):
                relaid.add(n)
        elif n.op == "call_function" and n.target not in (_in_traced_layout, _in_traced_order):
            if any(a in relaid for a in n.all_input_nodes):
                relaid.add(n)
    return relaid


def _engine_result(n: fx.Node) -> bool:
    """An engine partition's call (one result) or an element of its results."""
    if n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], fx.Node):
        n = n.args[0]
    return n.op == "call_module" and str(n.target).startswith(PREFIX)


def _plain(val: Any) -> bool:
    """Laid out as the engine returns a result: contiguous from offset 0 over a storage of just
    its elements (judged by the symbols' example values; no guard is added). Non-tensors too."""
    if not isinstance(val, torch.Tensor):
        return True
    numel = 1
    for v in val.shape:
        numel *= _hint(v)
    return _dense_order(val) == tuple(range(val.dim())) and _hint(val.storage_offset()) == 0 \
        and _hint(val.untyped_storage().nbytes()) == numel * val.element_size()


def _restride_node(gm: fx.GraphModule, root: fx.Node, must: bool) -> Optional[fx.Node]:
    val = meta(root)
    geometry = (tuple(val.stride()), val.storage_offset(), val.untyped_storage().nbytes() // val.element_size())
    if all(isinstance(v, int) for v in (*geometry[0], *geometry[1:])):
        fn, args = _in_traced_layout, (root, *geometry)
    elif _dense_order(val) is not None and _hint(val.storage_offset()) == 0:
        fn, args = _in_traced_order, (root, _dense_order(val))
    elif must:
        raise Unsupported(f"[updraft.partition] as_strided (or a custom op) reads {root.name}, whose traced "
                          "layout (symbolic sizes, not dense) cannot be rebuilt per call; the graph runs in PyTorch")
    else:
        return None
    with gm.graph.inserting_after(root):
        node = gm.graph.call_function(fn, args)
    node.meta["val"] = val
    return node


def _hint(v: Any) -> int:
    return torch.fx.experimental.symbolic_shapes.optimization_hint(v)


def _dense_order(val: torch.Tensor) -> Optional[tuple]:
    """lowerer.dense_order of a traced value, by the symbols' example values (no guard is added)."""
    return dense_order([_hint(v) for v in val.shape], [_hint(v) for v in val.stride()])


def _in_traced_layout(x: torch.Tensor, stride: tuple, offset: int, storage: int) -> torch.Tensor:
    """x's values in the storage layout its graph was traced with (_restride_roots). Storage the
    trace had beyond x's elements (x was a view there) is zeros here."""
    if x.stride() == stride and x.storage_offset() == offset \
            and x.untyped_storage().nbytes() == storage * x.element_size():
        return x
    base = x.new_empty(storage) if storage == x.numel() else x.new_zeros(storage)
    return base.as_strided(x.shape, stride, offset).copy_(x)


def _in_traced_order(x: torch.Tensor, order: tuple) -> torch.Tensor:
    """x's values dense in the traced dimension order (outermost first), symbolic sizes."""
    want, step = [0] * x.dim(), 1
    for d in reversed(order):
        want[d], step = step, step * x.shape[d]
    if list(x.stride()) == want and x.storage_offset() == 0:
        return x
    return torch.empty_permuted(x.shape, order, dtype=x.dtype, device=x.device).copy_(x)


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
