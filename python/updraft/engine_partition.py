"""Running one engine partition: `EnginePartition`, the module that replaces a group of
supported nodes in the outer GraphModule (partition.py decides the groups).

It builds its engine graph at its first call, when real tensors are at hand: inputs marked
constant (frozen parameters, graph attributes) become engine constants (zero-copy); the rest
are runtime inputs. Per call it finds the plan bound to the input signature (binding one, a
single engine plan lookup, for a new signature), allocates outputs with torch.empty and lets
the engine write them. It rebuilds when the backend says its constants changed (`invalidate`),
and runs in PyTorch for good when building or running fails (with fallback) or the recompile
limit is reached. A graph called with the parameters of several module instances keeps one
state per parameter set (`keep_sets`): the backend names the set of each call in `active`.

It does not decide what runs in the engine (support.py, partition.py) nor key, load or store
compile-cache entries (partition_cache.py).
"""
from __future__ import annotations

import collections
import sys
import threading
import time
from typing import Any, Optional, Sequence

import torch
import torch.autograd.profiler as _torch_profiler
from torch import fx

from . import partition_cache, profiler
from .config import CompilerConfig
from .lowering import TORCH_DTYPES, Lowerer, Unsupported, is_shape_arithmetic, meta
from .lowerer import inverse_order, memory_order, size_input_exprs
from .report import PartitionReport, warn_once

# Shape signatures per partition that keep a bound plan for the fast path (the engine's own
# plan cache holds 16 by default; a bound plan stays alive while bound, so this is bounded too).
_MAX_BOUND_PLANS = 16

# aten ops whose engine lowering reads `self` only as the base of one scatter (lowering_shape.py),
# whose kernel copies the base into its output and skips that copy when both are the same
# memory: a graph input such an op writes (a static KV cache's index_put) can take the result in
# place (EnginePartition.write_input_in_place). Not the accumulating forms: a call that fails in
# the engine after its scatter runs again in PyTorch on the written input, which repeats a
# plain write but would add twice.
IN_PLACE_WRITERS = (torch.ops.aten.index_put.default, torch.ops.aten.scatter.src, torch.ops.aten.scatter.value)

# For the pointwise in-place rule (EnginePartition._pointwise_cone), beside aten's pointwise
# tag: copies that map element i to element i (with a broadcast source), and factories that
# read their template's shape only (foreach lerp's weights are full_like of each tensor).
_POINTWISE_COPIES = (torch.ops.aten.copy.default, torch.ops.aten._to_copy.default)
_SHAPE_ONLY = (torch.ops.aten.full_like.default, torch.ops.aten.zeros_like.default,
               torch.ops.aten.ones_like.default, torch.ops.aten.empty_like.default)

# Lowered only when a consumer asks (so addmm(b, x, permute(w)) absorbs the permute, and
# index_put into a full(...) broadcasts its value instead of making a constant of its size).
_DEFERRED = {torch.ops.aten.permute.default, torch.ops.aten.t.default, torch.ops.aten.full.default}


def _accumulates(node: fx.Node) -> bool:
    """index_put(self, indices, values, accumulate): whether it adds (the scatters in
    IN_PLACE_WRITERS never do; their fourth argument is the source)."""
    if node.target is not torch.ops.aten.index_put.default:
        return False
    return bool(node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False))


class _Active(threading.local):
    """The parameter set (backend.PartitionedGraph's slot) of the call running on this thread.
    The graph sets it before calling its partitions, so two threads running two module
    instances through one graph each use their own engine state."""
    slot = 0


active = _Active()


# Called as lowered_hook(partition, graph, args) with the lowered engine graph just before the engine
# compile consumes it (updraft.debug.bisect keeps the reproducer's IR this way); None: nothing.
lowered_hook = None


def _c():
    from . import _C
    return _C


class EnginePartition(torch.nn.Module):
    """One fused partition: a sub-GraphModule run by the engine (eagerly if building fails)."""

    def __init__(self, sub: fx.GraphModule, const_kinds: list[Optional[str]], config: CompilerConfig,
                 report: PartitionReport, multi: Optional[bool] = None) -> None:
        # multi: whether it returns a tuple; None reads it off sub's graph (a partition loaded by
        # precompile.py has saved code, no graph, and passes it).
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
        # The engine state: None (not built), a _Built, or the reason it runs in PyTorch (str).
        # One (`_one`) until the graph meets a second parameter set; then one per set's slot.
        self._one: Any = None
        self._by_set: Optional[dict] = None
        self._lock = threading.Lock()
        if multi is None:
            out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
            multi = isinstance(out, (tuple, list))
        self._multi = multi
        self.dump: Any = None  # updraft.debug.dump.PartitionDump when CompilerConfig.dump_dir is set
        # output j -> placeholder p: output j is written into input p's memory and returned as
        # that tensor (write_input_in_place).
        self._input_writes: dict[int, int] = {}
        # Whether some input write is pointwise (write_input_in_place): its output is computed
        # from the input's old value, so a call cannot be repeated on the written input.
        self._rewrites_inputs = False
        self._io: Any = None  # (placeholders, outputs, times each output node is returned), on demand
        profiler.register(self)

    def write_input_in_place(self, j: int, p: int) -> bool:
        """Makes output j be written into input p's memory, when one of two rules shows that no
        step reads p after output j's step writes it:
        - a scatter: output j is an IN_PLACE_WRITERS node whose base is placeholder p, and
          nothing else in the partition reads p. Its kernel copies the base into its output (a
          no-op on the same memory) and then writes the scattered rows: a static KV cache.
        - pointwise: every node output j is computed from is pointwise (`_pointwise_cone`),
          every reader of p is among them and has p's shape, and output j has p's shape and
          dtype. Each engine step reading p is then output j's own step, an elementwise kernel
          that reads element i before it writes element i, or a step before it: an optimizer's
          parameter and moment updates (`p.mul_(1 - lr * wd)`, `exp_avg.lerp_(grad, 0.1)`).
          A call that fails after such a write cannot run again in PyTorch (_failed_after_write).
        The caller vouches that input p is written with output j's value after the call anyway
        (AOTAutograd's copy-back of a mutated input, which becomes a no-op on the same tensor)
        and that nothing outside reads p's old value."""
        if self._io is None:  # an optimizer step asks once per parameter and moment: walk once
            out = self.sub.graph.output_node().args[0]
            outs = list(out) if self._multi else [out]
            self._io = (list(self.sub.graph.find_nodes(op="placeholder")), outs,
                        collections.Counter(id(o) for o in outs))
        placeholders, outs, times = self._io
        if not (0 <= p < len(placeholders) and 0 <= j < len(outs)) or self.const_mask[p]:
            return False
        ph, node = placeholders[p], outs[j]
        if not isinstance(node, fx.Node) or times[id(node)] != 1:
            return False
        if node.target in IN_PLACE_WRITERS:
            if node.args[0] is not ph or list(ph.users) != [node] or _accumulates(node):
                return False
        elif not self._pointwise_write(ph, node):
            return False
        else:
            self._rewrites_inputs = True
        self._input_writes[j] = p
        return True

    @staticmethod
    def _pointwise_write(ph: fx.Node, node: fx.Node) -> bool:
        """The pointwise rule of write_input_in_place for placeholder ph and output node."""
        pm, om = meta(ph), meta(node)
        if not (isinstance(pm, torch.Tensor) and isinstance(om, torch.Tensor)) or pm.shape != om.shape \
                or pm.dtype != om.dtype:
            return False
        cone = EnginePartition._pointwise_cone(node)
        return cone is not None and all(u in cone and meta(u).shape == pm.shape for u in ph.users)

    @staticmethod
    def _pointwise_cone(node: fx.Node) -> Optional[set]:
        """The nodes `node` is computed from, itself included, when every computing one among
        them is pointwise (aten's pointwise tag, or a copy without a layout change) or reads no
        tensor's values (full, scalar_tensor, full_like); else None. Such a cone holds no matmul, convolution or
        reduction, whose engine kernel could read an operand fused into it (a residual add)
        after writing part of its output."""
        cone, todo = set(), [node]
        while todo:
            n = todo.pop()
            if n in cone:
                continue
            cone.add(n)
            if n.op == "call_function":
                pointwise = torch.Tag.pointwise in getattr(n.target, "tags", ()) or (
                    n.target in _POINTWISE_COPIES and "memory_format" not in n.kwargs)
                if n.all_input_nodes and not pointwise and n.target not in _SHAPE_ONLY:
                    return None
            elif n.op not in ("placeholder", "get_attr"):
                return None
            todo.extend(n.all_input_nodes)
        return cone

    def _outputs_for(self, metas: list, args: Sequence) -> list:
        """Output tensors for a call: fresh ones, and for each input write its input, when that
        input has the output's shape and dtype and is contiguous (a strided one, e.g. an
        optimizer state of a channels-last weight, gets a new tensor that AOTAutograd copies
        back: the engine writes outputs contiguous)."""
        outs = []
        for j, (s, d) in enumerate(metas):
            p = self._input_writes.get(j)
            a = args[p] if p is not None else None
            ok = a is not None and a.shape == s and a.dtype is d and a.is_contiguous()
            outs.append(a if ok else torch.empty(s, dtype=d))
        return outs

    def _raise_if_written(self, e: Exception, outs: list, args: Sequence) -> None:
        """After an engine error: a call that wrote an input pointwise in place cannot run
        again in PyTorch (_failed_after_write raises); any other returns to the caller."""
        if self._rewrites_inputs and any(o is a for o in outs for a in args):
            self._failed_after_write(e)

    @property
    def _state(self) -> Any:
        """The state of the parameter set of this thread's call."""
        by = self._by_set
        return self._one if by is None else by.get(active.slot)

    @_state.setter
    def _state(self, st: Any) -> None:
        if self._by_set is None:
            self._one = st
        else:
            self._by_set[active.slot] = st

    def keep_sets(self, slot: int) -> None:
        """From now on one state per parameter set; the state so far belongs to set `slot`."""
        with self._lock:
            if self._by_set is None:
                self._by_set = {slot: self._one}
                self._one = None

    def invalidate(self, slot: Optional[int] = None) -> None:
        """Drops the engine graph of set `slot` (None: this thread's; its constants changed, or
        the set was dropped); the next call with that set rebuilds it."""
        with self._lock:
            if self._by_set is None:
                self._one = None
            else:
                self._by_set.pop(active.slot if slot is None else slot, None)

    def run_in_pytorch(self, reason: str) -> None:
        """From now on this partition runs in PyTorch, for every parameter set (the recompile
        limit was reached)."""
        with self._lock:
            self._by_set, self._one = None, reason
            self.report.status = f"in PyTorch: {reason}"

    def forward(self, *args: Any) -> Any:
        return self._call(args)

    def run_boxed(self, args: list) -> Any:
        """A call given the only list of its inputs (backend.PartitionedGraph.release_inputs: a
        training backward, whose saved activations AOTAutograd hands over). On the bound fast
        path the list is emptied and the engine drops each runtime input after its last reader
        (PlannedCall.run_releasing), so an input nothing else holds is freed while the rest of
        the call runs, as eager autograd frees each saved tensor after its node, and each output
        is torch.empty'd at its first writer, in the room freed inputs left. Any other
        path runs as forward() does, holding every input to the end."""
        return self._call(args, boxed=True)

    def _call(self, args: Sequence, boxed: bool = False) -> Any:
        by = self._by_set
        st = self._one if by is None else by.get(active.slot)
        if st is None:
            if any(isinstance(a, torch._subclasses.FakeTensor) for a in args):
                return self.sub(*args)  # traced again under fake mode (e.g. by a nested compile)
            st = self._build_once(args)
        if isinstance(st, str):
            return self.sub(*args)
        if _torch_profiler._is_profiler_enabled or profiler.tracing:  # step ranges (profiler.py)
            return profiler.run_observed(self, st, args)
        # Tensors cross as data pointers through a plan bound to the input signature
        # (PlannedCall): no DLPack, no plan lookup once the signature is bound. That needs each
        # runtime input to be a CPU tensor of the dtype the engine graph was built for (the shape
        # is the key); a strided one passes its strides, for the plan to pack. Anything else
        # takes _run_general.
        ins = [args[j] for j in st.runtime_pos]
        if st.any_order:
            ins = [in_memory_order(t, o) for t, o in zip(ins, st.orders)]
        sig = [t.shape for t in ins]
        if st.size_pos:  # a size input's value is its signature; the plan holds it (ptr 0)
            sig += [args[j] for j in st.size_pos]
        key = tuple(sig)
        ptrs, strided = [], []
        for k, (t, dt) in enumerate(zip(ins, st.in_dtypes)):
            if t.dtype is not dt or not t.is_cpu:
                return self._run_general(st, args)
            if not t.is_contiguous():
                strided.append((k, t.stride()))
            ptrs.append(t.data_ptr())
        t = None  # run_boxed: `ins` must be the only holder of its tensors
        ptrs += [0] * len(st.size_pos)
        try:
            call = st.calls.get(key)
            if call is None:
                # A new signature (every decode step, as the KV length grows): bound here, one
                # plan lookup (a build, or an instance of a range plan), and run by pointers.
                call = self._bind(st, key)
            if boxed and not self._input_writes:
                rest = list(args)
                for j in st.runtime_pos:
                    rest[j] = None
                args.clear()  # `ins` holds the runtime inputs now; the engine drops them one by one
                meta = call[1]
                try:
                    outs = call[0].run_releasing(ptrs, ins, strided, lambda k: torch.empty(meta[k][0], dtype=meta[k][1]))
                except _c().UpdraftError as e:
                    if any(t is None for t in ins):
                        self._failed_after_release(e, ins)
                    for j, t, o in zip(st.runtime_pos, ins, st.orders):
                        rest[j] = _in_logical_order(t, o)
                    args = rest
                    raise
            else:
                outs = self._outputs_for(call[1], args) if self._input_writes else [torch.empty(s, dtype=d) for s, d in call[1]]
                try:
                    call[0].run(ptrs, [o.data_ptr() for o in outs], strided)
                except _c().UpdraftError as e:
                    self._raise_if_written(e, outs, args)
                    raise
        except _c().UpdraftError as e:
            return self._engine_failed(e, args)
        return tuple(outs) if self._multi else outs[0]

    def _failed_after_release(self, e: Exception, ins: list) -> None:
        """The engine failed a run_boxed call after dropping some inputs."""
        freed = sum(t is None for t in ins)
        self._failed_unrepeatable(e, f"It had already freed {freed} of this call's {len(ins)} inputs "
                                     "(CompilerConfig.release_saved)", " CompilerConfig(release_saved=False) keeps "
                                     "the inputs for a re-run.")

    def _failed_after_write(self, e: Exception) -> None:
        """The engine failed a call that writes inputs pointwise in place (an optimizer step):
        some may hold their new values already. From the next call on, PyTorch writes new
        tensors that AOTAutograd copies back."""
        self._failed_unrepeatable(e, f"The call writes {len(self._input_writes)} of its inputs in place, some "
                                     "computed from their old values, which it may have overwritten already")

    def _failed_unrepeatable(self, e: Exception, why: str, hint: str = "") -> None:
        """An engine error in a call PyTorch cannot run again (`why`): the call raises (a
        watchdog timeout as it is), and the partition runs in PyTorch from the next call on."""
        if isinstance(e, _c().WatchdogTimeout):
            raise e
        msg = f"[updraft.partition] {self.report.name}: engine error at run time: {e}"
        with self._lock:
            self._state = msg
            self.report.fail(f"engine error at run time: {e}")
        raise RuntimeError(f"{msg}. {why}, so PyTorch cannot run the call again; the partition runs in PyTorch "
                           f"from the next call on.{hint}") from e

    def _engine_failed(self, e: Exception, args: tuple) -> Any:
        """The engine raised `e` running this call. PyTorch runs the same call: when it fails too,
        the input was at fault (an index out of range), and the caller gets PyTorch's own error
        (its type and words, as without updraft), while the partition stays in the engine for the
        next call. When PyTorch succeeds, the engine is at fault: with fallback the partition runs
        in PyTorch from now on (one warning), without it the engine's error is raised. A watchdog
        timeout (CompilerConfig.watchdog_s) is neither: it reaches the caller as it is."""
        if isinstance(e, _c().WatchdogTimeout):
            raise e
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

    def _run_general(self, st: "_Built", args: tuple, observer: Any = None) -> Any:
        """Any inputs (strided, requiring grad, another dtype): DLPack views, which the engine
        checks and packs; an optional _C.StepObserver sees the engine's steps
        (profiler.run_observed). Output shapes come from the signature's bound call; an input
        written in place (write_input_in_place) is its output's buffer when it is contiguous and
        of the output's dtype, else a new tensor that AOTAutograd copies back."""
        ins = []
        for j, order in zip(st.runtime_pos, st.orders):
            t = args[j]
            if t.requires_grad:
                t = t.detach()
            ins.append(in_memory_order(t, order))  # strided as it comes: the plan packs it (src/runtime/plan.h)
        sizes = [int(args[j]) for j in st.size_pos]
        key = tuple(t.shape for t in ins) + tuple(sizes)
        ins += [torch.tensor(v, dtype=torch.int64) for v in sizes]
        try:
            call = st.calls.get(key)
            if call is None:
                call = self._bind(st, key)
            outs = self._outputs_for(call[1], args)
            try:  # detached: a parameter written in place requires grad, which DLPack refuses
                st.cg.run(ins, [o.detach() for o in outs] if self._input_writes else outs, observer)
            except _c().UpdraftError as e:
                self._raise_if_written(e, outs, args)
                raise
        except _c().UpdraftError as e:
            return self._engine_failed(e, args)
        return tuple(outs) if self._multi else outs[0]

    def _bind(self, st: "_Built", key: tuple) -> tuple:
        """Binds a plan to the input signature `key` (tensor shapes, then size values) and keeps
        it for the calls that follow: (PlannedCall, [(output shape, dtype)]). One plan lookup:
        the engine builds the plan, or instantiates its size bucket's range plan, or finds it in
        its plan cache. Bound outside the lock (a plan build releases the GIL); added and
        evicted under it, as threads binding other signatures change the table meanwhile.
        Readers need no lock: dict.get is atomic, and a call evicted after its lookup keeps its
        plan alive while it runs. At most _MAX_BOUND_PLANS are kept, oldest bound first out: a
        PlannedCall pins its plan, and a growing dim (a decode step's KV length) makes a new
        signature per call."""
        n = len(st.runtime_pos)
        sig = [list(s) for s in key[:n]] + [[int(v)] for v in key[n:]]  # the engine's input signature
        planned = st.cg.planned(sig)
        call = (planned, list(zip((tuple(s) for s in planned.output_shapes), st.out_dtypes)))
        if self.dump is not None:
            self.dump.plan(st.cg, sig)
        # After every bind, so the report counts every plan build (rebuilds after the engine's
        # LRU evicted a plan too: a bound signature is never looked up again while bound).
        self._record_plan_stats(st.cg)
        with st.lock:
            if key not in st.calls:
                while len(st.calls) >= _MAX_BOUND_PLANS:
                    del st.calls[next(iter(st.calls))]
                st.calls[key] = call
        return call

    def _record_plan_stats(self, cg: Any) -> None:
        r = self.report
        r.plans_built, r.plans_instantiated, r.range_plans = cg.plans_built, cg.plans_instantiated, cg.range_plans
        r.plan_ms, r.plan_cpu_ms = cg.total_plan_ms, cg.total_plan_cpu_ms
        r.kernels_created, r.kernels_reused = cg.kernels_created, cg.kernels_reused
        r.finite_kernels, r.finite_scanned = cg.finite_kernels, cg.finite_scanned

    def _build_once(self, args: tuple) -> Any:
        with self._lock:
            st = self._state
            if st is None:
                try:
                    st = self._build(args)
                    st.cg.label = self.report.name  # what the watchdog's report calls it
                    self.report.status = "ok"
                    if self.dump is not None:
                        self.dump.built(st.cg)
                except Exception as e:  # any engine/lowering error: eager, or raise if strict
                    reason = f"{type(e).__name__}: {e}" if not isinstance(e, Unsupported) else str(e)
                    self.report.fail(reason)
                    if self.dump is not None:
                        self.dump.failed(reason)
                    if not self.config.fallback:
                        raise RuntimeError(
                            f"[updraft.partition] {self.report.name} failed to compile: {reason}; "
                            "set CompilerConfig(fallback=True) to run it in PyTorch instead") from e
                    warn_once(f"[updraft.partition] {self.report.name} failed to compile "
                              f"({reason}); running it in PyTorch")
                    st = reason
                self._state = st
            return st

    def _build(self, args: tuple) -> "_Built":
        C = _c()
        t0 = time.perf_counter()
        placeholders = list(self.sub.graph.find_nodes(op="placeholder"))  # indexed: no walk over the graph
        runtime_pos = [j for j in self._other_pos if not self.const_mask[j] and isinstance(args[j], torch.Tensor)]
        check_traced_dtypes(placeholders, runtime_pos, args)
        size_pos = self._size_pos(args, placeholders, runtime_pos)
        orders = input_orders(placeholders, runtime_pos, args)
        disk, key, params = partition_cache.key_for(self, args, placeholders, size_pos, orders)
        if key is not None:
            loaded = partition_cache.load(self, disk, key, params, args, runtime_pos, size_pos, t0)
            if loaded is not None:
                cg, out_dtypes = loaded
                self._report_weights(cg)
                return _Built(cg, runtime_pos, out_dtypes, [args[j].dtype for j in runtime_pos], size_pos, orders)
        lw, ids, n_const = lower_graph(self.sub.graph, args, self.const_kinds, runtime_pos, size_pos, self._outputs(),
                                       orders)
        out_dtypes = self._check_out_dtypes([lw.g.value_type(i)[0] for i in ids])
        debug_text = lw.g.text() if self.config.debug >= 2 else None
        if lowered_hook is not None:
            lowered_hook(self, lw.g, args)
        t1 = time.perf_counter()
        cg = C.compile(lw.g, self.config.engine_options())
        self.report.skipped_passes = list(cg.skipped_passes())
        self._report_weights(cg)
        self.report.engine_compiles += 1
        self.report.lower_ms = (t1 - t0) * 1e3
        self.report.compile_ms = cg.compile_ms
        self.report.num_inputs = len(runtime_pos) + len(size_pos)
        self.report.num_constants = n_const
        if self.config.debug >= 2:
            print(f"[updraft] {self.report.name} engine graph:\n{debug_text}\n"
                  f"[updraft] after passes:\n{cg.graph_text()}", file=sys.stderr)
            for name, changed, ms, note in cg.pass_log():
                print(f"[updraft]   pass {name}: changed={changed} {ms:.2f} ms {note}", file=sys.stderr)
        if key is not None:
            partition_cache.store(self, disk, key, cg)
        return _Built(cg, runtime_pos, out_dtypes, [args[j].dtype for j in runtime_pos], size_pos, orders)

    def _report_weights(self, cg: Any) -> None:
        """The engine's constant bytes, and what CompilerConfig.weight_dtype stored low-precision
        in this compile (for explain)."""
        self.report.constant_bytes = dict(cg.constant_bytes)
        self.report.weight_dtype = self.config.weight_dtype
        self.report.low_precision_weights = dict(cg.low_precision_weights())
        self.report.int8_activations = cg.int8_activation_linears()

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
        return check_out_dtypes(self._outputs(), engine_dtypes)


def lower_graph(graph: fx.Graph, args: Sequence, const_kinds: Sequence[Optional[str]], runtime_pos: list[int],
                size_pos: list[int], outputs: list, orders: Optional[dict] = None) -> tuple[Lowerer, list[int], int]:
    """Lowers `graph` into a new engine graph, its outputs set; returns (lowerer, output ids,
    number of constants). Shared by a partition's build and updraft.export, so a model file
    holds the graph torch.compile would build.

    `args` holds a value per placeholder (real tensors for the constants; FakeTensors or
    anything for the rest: only their node's metadata is read). const_kinds[j]: "param" (an
    engine constant that records placeholder j as its source, so a compile-cache entry refers
    to the caller's tensor), "literal" (a constant stored by value), or None. runtime_pos: the
    tensor inputs, in call order; size_pos: the size inputs (lowerer.size_input_exprs), after
    them. `outputs`: the FX nodes whose values the graph returns, in order. `orders`:
    placeholder index -> memory order (lowerer.memory_order) for runtime inputs the caller
    passes permuted into that order (input_orders); a model file (export) takes none.
    """
    placeholders = list(graph.find_nodes(op="placeholder"))  # indexed: no walk over the graph
    lw = Lowerer(_c().Graph())
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
        if const_kinds[j] is not None:
            vid = lw.constant(arg, name=ph.name, source=j if const_kinds[j] == "param" else -1)
            lw.env[ph] = vid
            n_const += 1
        else:
            vid = lw.bind_input(ph, ph.name, (orders or {}).get(j))
        bound_ids.add(vid)
    lw.add_size_inputs()
    for n in graph.nodes:
        # A node computing a size (sym_size in an exported graph) emits nothing: lowerings read
        # sizes from the nodes' metadata (Lowerer.dim). A partition holds no such node.
        if n.op == "call_function" and n not in lw.env and n.target not in _DEFERRED and not is_shape_arithmetic(n):
            lw.lower(n)
    ids, seen = [], set()
    for o in outputs:
        vid = lw.value(o)
        if vid in seen or vid in bound_ids:
            vid = lw.emit1("copy", [vid])  # the engine writes each output buffer once
        seen.add(vid)
        ids.append(vid)
    lw.g.set_outputs(ids)
    return lw, ids, n_const


def check_traced_dtypes(placeholders: list, runtime_pos: list[int], args: tuple) -> None:
    """Unsupported when a runtime input arrives in another dtype than the traced graph gives it.
    The engine graph is lowered from the traced dtypes (node.meta["val"]), and its calls pass data
    pointers, so such an input would be read as the traced dtype's bytes. It happens where one of
    torch's meta functions and its CPU kernel disagree: under bf16 autocast, the mean and rstd
    that the CPU's native_layer_norm returns for a bf16 input are float32, where its meta says
    bfloat16, and a training backward reads them (silently wrong gradients before this check).
    PyTorch then runs the partition, with the dtypes it gets."""
    for j in runtime_pos:
        traced = meta(placeholders[j])
        if isinstance(traced, torch.Tensor) and traced.dtype != args[j].dtype:
            raise Unsupported(
                f"input {placeholders[j].name} arrives as {args[j].dtype} where the traced graph has "
                f"{traced.dtype} (torch's meta function and its CPU kernel disagree on its dtype); "
                "the engine would read its bytes as the traced dtype, so PyTorch runs this partition")


def input_orders(placeholders: list, runtime_pos: list[int], args: tuple) -> dict:
    """Placeholder index -> memory order for the runtime inputs that the building call passes
    as dense permuted views (lowerer.memory_order): a training backward's saved transposes
    (ViT-B/16: 36 of [48, 64, 197], 87 MB a step), a channels-last image. Each call passes such
    an input as `t.permute(order)`, contiguous when the tensor is laid out as at that first
    call, so the plan does not pack a copy of it for the whole call (src/runtime/plan.h); one
    laid out otherwise is packed as before. The layout is read from the call's tensor, not the
    trace: the engine returns its outputs contiguous where torch's op would have returned a
    view (the flash attention forward's result and log-sum-exp are [B, L, H, E] and [B, L, H]
    in memory), so a backward traced with torch's strides gets the engine's layout. Only inputs
    traced with static sizes and strides (one layout per graph)."""
    orders = {}
    for j in runtime_pos:
        traced = meta(placeholders[j])
        if not isinstance(traced, torch.Tensor) or not all(
                type(v) is int for v in tuple(traced.shape) + tuple(traced.stride())):
            continue
        order = memory_order(args[j])
        if order is not None:
            orders[j] = order
    return orders


def in_memory_order(t: Optional[torch.Tensor], order: Optional[tuple]) -> Optional[torch.Tensor]:
    """Runtime input `t` as the engine takes it: permuted into its memory order (a free view)."""
    return t if order is None or t is None else t.permute(order)


def _in_logical_order(t: Optional[torch.Tensor], order: Optional[tuple]) -> Optional[torch.Tensor]:
    """The inverse of in_memory_order: the caller's tensor again (for PyTorch to run the call)."""
    return t if order is None or t is None else t.permute(inverse_order(order))


def check_out_dtypes(outputs: list, engine_dtypes: list[str]) -> list[torch.dtype]:
    """The torch dtypes of the engine graph's outputs; Unsupported where one differs from the
    dtype torch gives the FX output node."""
    out_dtypes = [TORCH_DTYPES[d] for d in engine_dtypes]
    for o, got in zip(outputs, out_dtypes):
        if got != meta(o).dtype:
            raise Unsupported(f"output {o.name}: engine dtype {got} differs from torch's {meta(o).dtype}")
    return out_dtypes


class _Built:
    __slots__ = ("cg", "runtime_pos", "size_pos", "out_dtypes", "in_dtypes", "orders", "any_order", "calls", "lock")

    def __init__(self, cg: Any, runtime_pos: list[int], out_dtypes: list[torch.dtype],
                 in_dtypes: list[torch.dtype], size_pos: list[int], orders: dict) -> None:
        self.cg = cg
        self.runtime_pos = runtime_pos  # tensor inputs
        # By runtime input: the memory order it is passed in (input_orders), or None.
        self.orders = [orders.get(j) for j in runtime_pos]
        self.any_order = bool(orders)
        self.size_pos = size_pos  # size inputs (ints at run time), after the tensors
        self.out_dtypes = out_dtypes
        self.in_dtypes = in_dtypes  # runtime inputs' dtypes the engine graph was built for
        # input signature (tensor shapes, then size values) -> (PlannedCall, [(output shape,
        # dtype)]); at most _MAX_BOUND_PLANS, oldest bound first out. Changed only under `lock`.
        self.calls: dict = {}
        self.lock = threading.Lock()
