"""Split an aten graph into engine partitions and eager PyTorch, and run the partitions.

`partition_graph(gm, ...)` asks the lowering table + C.check_op about every node, groups the
supported ones with torch's CapabilityBasedPartitioner, and replaces each group by an
`EnginePartition` module. Unsupported nodes stay in the outer GraphModule and run eagerly.

An EnginePartition builds its engine graph at its first call, when real tensors are at hand:
inputs marked constant (frozen parameters, graph attributes) become engine constants
(zero-copy); the rest are runtime inputs. Per call it looks up the output shapes for the input
shapes (cached), allocates outputs with torch.empty and lets the engine write them.
"""
from __future__ import annotations

import collections
import operator
import sys
import threading
import time
import warnings
from typing import Any, Optional

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import partition_cost
from .cache import DiskCache, cache_for, entry_params, partition_key
from . import profiler
from .config import CompilerConfig
from .lowering import (TORCH_DTYPES, Lowerer, Unsupported, check_node, is_compute,
                       is_shape_arithmetic, meta, op_name)
from .lowerer import size_input_exprs
from .report import GraphReport, PartitionReport, count_cache_event

PREFIX = "updraft_partition_"

# Shape signatures per partition that keep a bound plan for the fast path (the engine's own
# plan cache holds 16 by default; a bound plan stays alive while bound, so this is bounded too).
_MAX_BOUND_PLANS = 16

# Lowered only when a consumer asks (so addmm(b, x, permute(w)) absorbs the permute).
_DEFERRED = {torch.ops.aten.permute.default, torch.ops.aten.t.default}

_warned: set = set()
_warn_lock = threading.Lock()


def warn_once(msg: str) -> None:
    with _warn_lock:
        if msg in _warned:
            return
        _warned.add(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _c():
    from . import _C
    return _C


class EngineSupport(OperatorSupport):
    """Supported = not listed in config.eager_ops, has a lowering, and the engine accepts it."""

    def __init__(self, config: CompilerConfig) -> None:
        super().__init__()
        self.config = config
        self.reasons: dict[fx.Node, Optional[str]] = {}

    def reason(self, node: fx.Node) -> Optional[str]:
        if node in self.reasons:
            return self.reasons[node]
        name = op_name(node)
        if node.op != "call_function":
            r = f"{node.op} node"
        elif name in self.config.eager_ops or name.rsplit(".", 1)[0] in self.config.eager_ops:
            r = "listed in CompilerConfig.eager_ops"
        else:
            r = check_node(node)
        if r is None and node.target is operator.getitem:
            parent = node.args[0]
            if isinstance(parent, fx.Node) and self.reason(parent) is not None:
                r = "its producer runs in PyTorch"
        self.reasons[node] = r
        return r

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        return self.reason(node) is None


class EnginePartition(torch.nn.Module):
    """One fused partition: a sub-GraphModule run by the engine (eagerly if building fails)."""

    def __init__(self, sub: fx.GraphModule, const_kinds: list[Optional[str]], config: CompilerConfig,
                 report: PartitionReport) -> None:
        super().__init__()
        self.sub = sub
        # Per placeholder: "param" (a frozen parameter/buffer: an engine constant the compile
        # cache refers to), "literal" (a graph attribute: a constant the cache stores), or None
        # (a runtime input).
        self.const_kinds = const_kinds
        self.const_mask = [k is not None for k in const_kinds]
        # Placeholder indices of the frozen parameters, and of the rest (inputs and literals).
        self._param_pos = [j for j, k in enumerate(const_kinds) if k == "param"]
        self._other_pos = [j for j, k in enumerate(const_kinds) if k != "param"]
        self.config = config
        self.report = report
        self._state: Any = None  # None: not built; _Built; or the failure reason (str)
        self._lock = threading.Lock()
        out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        self._multi = isinstance(out, (tuple, list))
        profiler.register(self)

    def invalidate(self) -> None:
        """Drops the engine graph (its constants changed); the next call rebuilds it."""
        with self._lock:
            self._state = None

    def run_in_pytorch(self, reason: str) -> None:
        """From now on this partition runs in PyTorch (the recompile limit was reached)."""
        with self._lock:
            self._state = reason
            self.report.status = f"in PyTorch: {reason}"

    def forward(self, *args: Any) -> Any:
        st = self._state
        if st is None:
            if any(isinstance(a, torch._subclasses.FakeTensor) for a in args):
                return self.sub(*args)  # traced again under fake mode (e.g. by a nested compile)
            st = self._build_once(args)
        if isinstance(st, str):
            return self.sub(*args)
        # Fast path, once a shape signature has run: the plan is bound (PlannedCall) and the
        # tensors cross as data pointers, no DLPack. It needs each runtime input to be a
        # contiguous CPU tensor of the dtype the engine graph was built for (the shape is the
        # dict key); anything else takes the general path below.
        ins = [args[j] for j in st.runtime_pos]
        sig = [t.shape for t in ins]
        if st.size_pos:  # a size input's value is its signature; the plan holds it (ptr 0)
            sig += [args[j] for j in st.size_pos]
        call = st.calls.get(tuple(sig))
        if call is not None:
            ptrs = []
            for t, dt in zip(ins, st.in_dtypes):
                if t.dtype is not dt or not t.is_cpu or not t.is_contiguous():
                    break
                ptrs.append(t.data_ptr())
            else:
                ptrs += [0] * len(st.size_pos)
                outs = [torch.empty(s, dtype=d) for s, d in call[1]]
                try:
                    call[0].run(ptrs, [o.data_ptr() for o in outs])
                except _c().UpdraftError as e:
                    return self._engine_failed(e, args)
                return tuple(outs) if self._multi else outs[0]
        return self._run_general(st, args)

    def _engine_failed(self, e: Exception, args: tuple) -> Any:
        """The engine raised `e` running this call. PyTorch runs the same call: when it fails too,
        the input was at fault (an index out of range), and the caller gets PyTorch's own error
        (its type and words, as without updraft), while the partition stays in the engine for the
        next call. When PyTorch succeeds, the engine is at fault: with fallback the partition runs
        in PyTorch from now on (one warning), without it the engine's error is raised."""
        try:
            out = self.sub(*args)
        except Exception as eager_error:
            raise eager_error from e
        if not self.config.fallback:
            raise e
        msg = f"[updraft.partition] {self.report.name}: engine error at run time: {e}"
        warn_once(msg + "; running this partition in PyTorch from now on")
        with self._lock:
            self._state = msg
            self.report.fail(f"engine error at run time: {e}")
        return out

    def _run_general(self, st: "_Built", args: tuple) -> Any:
        """Any inputs (strided, requiring grad): DLPack views, plan looked up by the engine."""
        ins = []
        for j in st.runtime_pos:
            t = args[j]
            if t.requires_grad:
                t = t.detach()
            if not t.is_contiguous():
                t = t.contiguous()
            ins.append(t)
        sizes = [int(args[j]) for j in st.size_pos]
        key = tuple(tuple(t.shape) for t in ins) + tuple(sizes)
        sig = [list(t.shape) for t in ins] + [[v] for v in sizes]  # the engine's input signature
        ins += [torch.tensor(v, dtype=torch.int64) for v in sizes]
        shapes = st.shapes.get(key)
        C = _c()
        try:
            if shapes is None:
                shapes = [tuple(s) for s in st.cg.prepare(sig)]
                st.shapes[key] = shapes
                # New shape signature: one more plan over the same engine compile.
                self.report.plans_built = getattr(st.cg, "plans_built", self.report.plans_built + 1)
                self.report.plan_ms = getattr(st.cg, "total_plan_ms", 0.0)
                self.report.plan_cpu_ms = st.cg.total_plan_cpu_ms
                self.report.kernels_created = st.cg.kernels_created
                self.report.kernels_reused = st.cg.kernels_reused
            outs = [torch.empty(s, dtype=d) for s, d in zip(shapes, st.out_dtypes)]
            st.cg.run(ins, outs)
            if key not in st.calls:  # later calls with this signature take the fast path
                # Bound outside the lock (a plan build releases the GIL); added and evicted under
                # it, as threads binding other signatures change the table meanwhile. Readers
                # need no lock: dict.get is atomic, and a call evicted after its lookup keeps
                # its plan alive while it runs.
                call = (st.cg.planned(sig), list(zip(shapes, st.out_dtypes)))
                with st.lock:
                    if key not in st.calls:
                        while len(st.calls) >= _MAX_BOUND_PLANS:
                            del st.calls[next(iter(st.calls))]  # a PlannedCall pins its plan: bound them
                        st.calls[key] = call
        except C.UpdraftError as e:
            return self._engine_failed(e, args)
        return tuple(outs) if self._multi else outs[0]

    def _build_once(self, args: tuple) -> Any:
        with self._lock:
            if self._state is None:
                try:
                    self._state = self._build(args)
                    self.report.status = "ok"
                except Exception as e:  # any engine/lowering error: eager, or raise if strict
                    reason = f"{type(e).__name__}: {e}" if not isinstance(e, Unsupported) else str(e)
                    self.report.fail(reason)
                    if not self.config.fallback:
                        raise RuntimeError(
                            f"[updraft.partition] {self.report.name} failed to compile: {reason}; "
                            "set CompilerConfig(fallback=True) to run it in PyTorch instead") from e
                    warn_once(f"[updraft.partition] {self.report.name} failed to compile "
                              f"({reason}); running it in PyTorch")
                    self._state = reason
            return self._state

    def _build(self, args: tuple) -> "_Built":
        C = _c()
        t0 = time.perf_counter()
        placeholders = list(self.sub.graph.find_nodes(op="placeholder"))  # indexed: no walk over the graph
        runtime_pos = [j for j in self._other_pos if not self.const_mask[j] and isinstance(args[j], torch.Tensor)]
        size_pos = self._size_pos(args, placeholders, runtime_pos)
        disk, key, params = self._cache_key(args, placeholders, size_pos)
        if key is not None:
            built = self._load_cached(disk, key, params, args, runtime_pos, size_pos, t0)
            if built is not None:
                return built
        lw = Lowerer(C.Graph())
        # Dynamic dims stay symbolic: every runtime input's symbols are known before any input
        # is bound, so one engine compile serves every size (see Lowerer.dim). SymInts that no
        # tensor carries are size inputs, after the tensors: their values bind their symbols.
        lw.declare_inputs([meta(placeholders[j]) for j in runtime_pos])
        lw.declare_sizes([placeholders[j].name for j in size_pos], [placeholders[j] for j in size_pos])
        bound_ids = set()
        n_const = 0
        for j, (ph, arg) in enumerate(zip(placeholders, args)):
            if not isinstance(arg, torch.Tensor):
                continue  # SymInts: size inputs (below), or sizes the engine reads off the tensors
            if self.const_mask[j]:
                vid = lw.constant(arg, name=ph.name, source=j if self.const_kinds[j] == "param" else -1)
                lw.env[ph] = vid
                n_const += 1
            else:
                vid = lw.bind_input(ph, ph.name)
            bound_ids.add(vid)
        lw.add_size_inputs()
        for n in self.sub.graph.nodes:
            if n.op == "call_function" and n not in lw.env and n.target not in _DEFERRED:
                lw.lower(n)
        outs = self._outputs()
        ids, seen = [], set()
        for o in outs:
            vid = lw.value(o)
            if vid in seen or vid in bound_ids:
                vid = lw.emit1("copy", [vid])  # the engine writes each output buffer once
            seen.add(vid)
            ids.append(vid)
        lw.g.set_outputs(ids)
        out_dtypes = self._check_out_dtypes([lw.g.value_type(i)[0] for i in ids])
        debug_text = lw.g.text() if self.config.debug >= 2 else None
        t1 = time.perf_counter()
        cg = C.compile(lw.g, self.config.engine_options())
        t2 = time.perf_counter()
        self.report.engine_compiles += 1
        self.report.lower_ms = (t1 - t0) * 1e3
        self.report.compile_ms = getattr(cg, "compile_ms", (t2 - t1) * 1e3)
        self.report.num_inputs = len(runtime_pos) + len(size_pos)
        self.report.num_constants = n_const
        if self.config.debug >= 2:
            print(f"[updraft] {self.report.name} engine graph:\n{debug_text}\n"
                  f"[updraft] after passes:\n{cg.graph_text()}", file=sys.stderr)
            for name, changed, ms, note in cg.pass_log():
                print(f"[updraft]   pass {name}: changed={changed} {ms:.2f} ms {note}", file=sys.stderr)
        if key is not None:
            self._store(disk, key, cg)
        return _Built(cg, runtime_pos, out_dtypes, [args[j].dtype for j in runtime_pos], size_pos)

    def _size_pos(self, args: tuple, placeholders: list, runtime_pos: list[int]) -> list[int]:
        """Placeholder indices of the size inputs (lowerer.size_input_exprs), in call order."""
        scalar_pos = [j for j in self._other_pos if isinstance(args[j], int) and not isinstance(args[j], bool)]
        if not scalar_pos:
            return []
        chosen = size_input_exprs([meta(placeholders[j]) for j in runtime_pos],
                                  [meta(placeholders[j]) for j in scalar_pos])
        return [scalar_pos[i] for i in chosen]

    def _outputs(self) -> list:
        out = self.sub.graph.output_node().args[0]
        return list(out) if self._multi else [out]

    def _check_out_dtypes(self, engine_dtypes: list[str]) -> list[torch.dtype]:
        out_dtypes = [TORCH_DTYPES[d] for d in engine_dtypes]
        for o, got in zip(self._outputs(), out_dtypes):
            if got != meta(o).dtype:
                raise Unsupported(f"output {o.name}: engine dtype {got} differs from torch's {meta(o).dtype}")
        return out_dtypes

    # -- the persistent compile cache (updraft/cache.py, docs/format.md)
    def _cache_key(self, args: tuple, placeholders: list, size_pos: list[int]) -> tuple:
        """(DiskCache, key, EntryParams), or (None, None, None) when the cache is off or unusable."""
        try:
            disk = cache_for(self.config)
        except OSError as e:
            warn_once(f"{e}; compiling without the cache")
            self.report.cache = f"off: {e}"
            return None, None, None
        if disk is None:
            return None, None, None
        C = _c()
        inputs = []
        for j in self._other_pos:
            arg, ph = args[j], placeholders[j]
            if j in size_pos:  # bound by value: its place among the engine's inputs matters
                inputs.append((j, "size", meta(ph)))
            elif not isinstance(arg, torch.Tensor):
                inputs.append((j, "other", meta(ph) if "val" in ph.meta else type(arg).__name__))
            elif self.const_kinds[j] == "literal":
                inputs.append((j, "literal", arg))
            else:
                inputs.append((j, "runtime", meta(ph)))
        # The parameters in one engine pass: their key text here, their pointers for the load.
        params = entry_params(args, self._param_pos)
        key = partition_key(self.sub.code, inputs, params.text, self.config.cache_options(), C.engine_version(),
                            C.cpu_features())
        return disk, key, params

    def _load_cached(self, disk: DiskCache, key: str, params: Any, args: tuple, runtime_pos: list[int],
                     size_pos: list[int], t0: float) -> Optional["_Built"]:
        C = _c()
        path = disk.lookup(key)
        if path is None:
            self.report.cache = "miss"
            count_cache_event("miss")
            return None
        try:
            cg, info = C.load_entry_file(str(path), key, params, self.config.engine_options())
            out_dtypes = self._check_out_dtypes(cg.output_dtypes())
        except Exception as e:  # whatever the failure, the entry would fail every later process too
            why = str(e) if isinstance(e, (C.UpdraftError, Unsupported)) else f"{type(e).__name__}: {e}"
            warn_once(f"[updraft.cache] entry {path} is unusable ({why}); removing it and "
                      "compiling again")
            disk.discard(key)
            self.report.cache = f"rebuilt: {why}"
            count_cache_event("rebuilt")
            return None
        self.report.cache = "hit"
        # Folded constants: taken from the entry (same weights; "mapped", from when entries were)
        # or replayed (a new checkpoint).
        if info["folded"]:
            self.report.cache_folds = "mapped" if info["mapped"] else "replayed"
        count_cache_event("hit")
        self.report.engine_compiles += 1
        self.report.lower_ms = 0.0
        self.report.compile_ms = cg.compile_ms
        self.report.cache_ms = (time.perf_counter() - t0) * 1e3
        self.report.num_inputs = len(runtime_pos) + len(size_pos)
        self.report.num_constants = params.tensors + sum(
            1 for j in self._other_pos if self.const_mask[j] and isinstance(args[j], torch.Tensor))
        return _Built(cg, runtime_pos, out_dtypes, [args[j].dtype for j in runtime_pos], size_pos)

    def _store(self, disk: DiskCache, key: str, cg: Any) -> None:
        """Stores the entry on a background thread (updraft/cache.py); the report says
        "stored" once it is written. The engine graph is immutable once compiled, so
        serialising it while the caller runs it is safe."""
        C = _c()
        report = self.report
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


class _Built:
    __slots__ = ("cg", "runtime_pos", "size_pos", "out_dtypes", "shapes", "in_dtypes", "calls", "lock")

    def __init__(self, cg: Any, runtime_pos: list[int], out_dtypes: list[torch.dtype],
                 in_dtypes: list[torch.dtype], size_pos: list[int]) -> None:
        self.cg = cg
        self.runtime_pos = runtime_pos  # tensor inputs
        self.size_pos = size_pos  # size inputs (ints at run time), after the tensors
        self.out_dtypes = out_dtypes
        self.shapes: dict = {}  # input signature (tensor shapes, then size values) -> output shapes
        self.in_dtypes = in_dtypes  # runtime inputs' dtypes the engine graph was built for
        # input-shape signature -> (PlannedCall, [(output shape, dtype)]): the fast path; at most
        # _MAX_BOUND_PLANS, oldest bound first out. Changed only under `lock`.
        self.calls: dict = {}
        self.lock = threading.Lock()


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
            report.add_fallback(op_name(n), reason, is_compute(n))
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
            part = EnginePartition(sub, const_kinds, config, prep)
            setattr(gm, node.target, part)
            engine_parts.append(part)
    if engine_parts:
        _views_to_reshapes(gm)
    report.partition_ms = (time.perf_counter() - t0) * 1e3
    return gm, engine_parts


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


def _views_to_reshapes(gm: fx.GraphModule) -> None:
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
