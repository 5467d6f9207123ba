"""The torch.compile backend.

    torch.compile(model, backend="updraft")                      # entry point, default config
    torch.compile(model, backend="updraft", options={"num_threads": 4})
    torch.compile(model, backend=updraft.get_backend(CompilerConfig(fallback=False)))

Dynamo graph -> AOTAutograd (core aten, minus the ops the engine runs natively) ->
  inference graph: partition + engine (parameters frozen into engine constants)
  training forward/backward graphs: partition + engine, parameters as inputs (docs/training.md)
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import gc
import math
import operator
import sys
import threading
import types
import unittest.mock
import weakref
from typing import Any, Callable, Optional

import torch
from torch import fx

from .config import CompilerConfig
from .engine_partition import EnginePartition, active
from . import host_memory
from .gears import GearBox
from .lowerer import load_c
from .partition import partition_graph, restride_outputs, restride_storage_reads, views_to_reshapes
from .random_ops import engine_rng_in
from .report import (HOST_MEMORY, INFERENCE_CHOICE, INPUT_WRITES, OUTPUT_LAYOUTS, SAVED_INPUTS, TRAINING_CHOICE,
                     GraphReport, report_for_new_graph, warn_once)
from .training import SETUP_STREAK_LIMIT, TRIALS, MeasuredChoice, attention_as_math_in, eager_copy, is_training

aten = torch.ops.aten

# Ops the core-aten table would decompose but the engine runs as one op (docs/ops.md). Those
# lowered onto the engine op of their own name are derived (`native_ops`); these are the ones
# the name does not show. convolution, addmm/mm/bmm, native_layer_norm, _softmax/_log_softmax,
# gelu and the pooling ops are not in core_aten_decompositions(), so they reach the lowering as
# they are.
EXTRA_NATIVE_OPS = (
    aten._scaled_dot_product_flash_attention_for_cpu.default,  # the engine's sdpa (another name)
    # A composite: kept, it becomes _adaptive_avg_pool2d (the engine's adaptive_avg_pool2d);
    # the table would write it as index arithmetic.
    aten.adaptive_avg_pool2d.default,
    aten.roll.default,  # slices + concat in the engine (the decomposition is index arithmetic)
    aten.native_batch_norm_backward.default,  # the engine's batch_norm_backward (training graphs)
    aten._safe_softmax.default,  # softmax with zero_masked_rows (attention's math form in training graphs)
)


def native_ops() -> list:
    """The ops kept out of the decompositions: EXTRA_NATIVE_OPS, and every core-aten op with a
    lowering onto the engine op of its own name (from the engine's op table, so a new engine op
    with an aten twin is kept whole with no edit here). Composite (CompositeImplicitAutograd)
    ops are left in the table: AOTAutograd decomposes them anyway, by their C++ composite
    instead of the table's rule, so popping them would only change which decomposition runs."""
    from torch._decomp import core_aten_decompositions

    from .lowering import LOWERINGS
    from .lowering_elementwise import is_composite

    engine = set(load_c().op_names())
    derived = [op for op in core_aten_decompositions()
               if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"
               and op._schema.name.split("::")[-1] in engine and op in LOWERINGS and not is_composite(op)]
    return sorted(set(derived) | set(EXTRA_NATIVE_OPS), key=str)


_TRAINING_NOTE = ("training graph (inputs require grad): runs in PyTorch, as "
                  "CompilerConfig(training=\"pytorch\") asks")


def decompositions() -> dict:
    """The decomposition table for AOTAutograd: torch's core-aten table minus the ops the
    engine runs whole (`native_ops`), plus the foreach ops as loops (`foreach_decompositions`)."""
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    for op in native_ops():
        table.pop(op, None)
    table.update(foreach_decompositions())
    return table


@functools.lru_cache(maxsize=1)
def foreach_decompositions() -> dict:
    """aten._foreach_<op> (what a torch.optim step with foreach=True traces to; torch has no
    decomposition for them, and Inductor lowers them itself) as one aten.<op> per list element:
    element i of every list argument, the other arguments as they are. Functional overloads
    whose base op exists (the in-place and out= ones are functionalised away first). An
    overload whose arguments no base overload takes stays whole (NotImplemented)."""
    table = {}
    names = {full.split("::", 1)[1].split(".", 1)[0] for full in torch._C._dispatch_get_all_op_names()
             if full.startswith("aten::_foreach_")}
    for name in sorted(n for n in names if not n.endswith("_")):  # in-place forms: functionalised away
        try:
            packet, base = getattr(torch.ops.aten, name), getattr(torch.ops.aten, name[len("_foreach_"):])
        except (AttributeError, RuntimeError):
            continue
        base_kwargs = {a.name for ov in base.overloads() for a in getattr(base, ov)._schema.arguments if a.kwarg_only}
        for ov in packet.overloads():
            op = getattr(packet, ov)
            schema = op._schema
            if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
                continue
            if len(schema.returns) != 1 or not isinstance(schema.returns[0].type, torch.ListType):
                continue
            table[op] = _foreach_loop(base, schema, base_kwargs)
    return table


def _foreach_loop(base: Any, schema: Any, base_kwargs: set) -> Callable:
    """The decomposition of one foreach overload: `base` called per list element."""
    args_spec = list(schema.arguments)
    lists = {a.name for a in args_spec if isinstance(a.type, torch.ListType)}

    def decomposed(*args: Any, **kwargs: Any) -> list:
        bound = {a.name: (args[k] if k < len(args) else kwargs.get(a.name, a.default_value))
                 for k, a in enumerate(args_spec) if k < len(args) or a.name in kwargs or a.has_default_value()}
        n = len(next(bound[a.name] for a in args_spec if a.name in lists))
        out = []
        for i in range(n):
            pos, kw = [], {}
            for a in args_spec:
                if a.name not in bound:
                    continue
                v = bound[a.name][i] if a.name in lists else bound[a.name]
                if a.kwarg_only or a.name in base_kwargs:
                    kw[a.name] = v
                else:
                    pos.append(v)
            try:
                out.append(base(*pos, **kw))
            except RuntimeError:
                # No overload of the base op takes these arguments this way (norm's dtype,
                # addcdiv's scalar list): the foreach op stays, and runs in PyTorch.
                return NotImplemented
        return out

    return decomposed


def _boxed(fn: Callable) -> Callable:
    def run(args: list) -> Any:
        return fn(*args)
    run._boxed_call = True
    run.__wrapped__ = fn  # precompile.py saves the graph behind it
    return run


def _boxed_function(compiled: Callable) -> Callable:
    """A plain function around a boxed callable: Dynamo wraps the backward compiler's result
    in `disable`, whose functools.wraps copies the instance __dict__ only, so a class
    attribute `_boxed_call` would be lost and AOTAutograd would call it unboxed."""
    if not isinstance(compiled, PartitionedGraph):
        return compiled

    def run(args: list) -> Any:
        return compiled(args)
    run._boxed_call = True
    run.__wrapped__ = compiled
    return run


def _box(*values: Any) -> list:
    """A partition's inputs as a list of their own (PartitionedGraph.release_inputs): once it is
    made, FX code drops its own references to inputs that have no later use."""
    return list(values)


def _run_boxed(part: EnginePartition, args: list) -> Any:
    return part.run_boxed(args)


# Every PartitionedGraph with frozen parameters: what `_drop_released` discounts as its own.
_graphs_with_sets: "weakref.WeakSet[PartitionedGraph]" = weakref.WeakSet()


class PartitionedGraph:
    """Boxed callable for one inference graph: the outer GraphModule with engine partitions.

    Frozen inputs (parameters/buffers) are engine constants. Dynamo reuses compiled code across
    module instances of the same class, and a parameter may be updated in place, so each call
    checks the frozen tensors' identity and version against the set it ran with last. Another
    set of tensors selects the partitions' state for that set (CompilerConfig.parameter_sets of
    them are kept, `_select`); a set modified in place rebuilds. (Measured on a 16-parameter
    MLP: ~2 us a call, almost all of it reading `_version`; a map/itemgetter version was no
    faster.) The outer GraphModule is ours and has no hooks, so it is called through
    `forward`, skipping nn.Module.__call__.
    """

    _boxed_call = True

    def __init__(self, gm: fx.GraphModule, parts: list[EnginePartition], frozen: list[int],
                 history: Optional["_History"] = None, config: Optional[CompilerConfig] = None,
                 report: Optional[GraphReport] = None, names: Optional[list] = None,
                 checked: Optional[list] = None) -> None:
        self.gm = gm
        self.parts = parts
        self.frozen = frozen
        # Frozen inputs whose bytes each call compares too (_running_stats_inputs), in order.
        self.checked = sorted(checked or [])
        self._checked = set(self.checked)
        self.history = history
        self.config = config
        self.report = report
        self._sets: collections.OrderedDict = collections.OrderedDict()  # id key -> _ParamSet, LRU first
        self._current: Optional[_ParamSet] = None  # the set of the last call
        self._next_slot = 0
        self._lock = threading.Lock()
        if frozen:
            _graphs_with_sets.add(self)
        self._names = names or [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self._boxed_gm: Optional[fx.GraphModule] = None  # release_inputs
        self.gears: list = []
        for gear in (config.gears if config is not None else ()):
            box = GearBox.bind(gear, gm, self._names, warn_once,
                               note=(lambda text: report.compiles.append(("gears", text))) if report is not None else None)
            if box is not None:
                self.gears.append(box)
                if report is not None:
                    report.compiles.append(("gears", f"{gear.input} dim {gear.dim} ({box.symbol}): plans for "
                                            f"{list(gear.sizes)} at the first call, padding "
                                            f"{'on' if box.padding else 'off'}"))

    def release_inputs(self) -> bool:
        """From now on a call takes its argument list over (boxed: the list is emptied, as
        AOTAutograd lets a backward do with the saved activations it steals) and frees each input
        after its last use: the outer graph's PyTorch nodes drop theirs as FX code does, and
        each partition gets its inputs in a list of their own (EnginePartition.run_boxed) that
        the engine empties as its steps pass their last readers. For graphs without frozen
        parameters or gears (a training graph); False when it does not apply."""
        if self.frozen or self.gears:
            return False
        g = fx.Graph()
        env = g.graph_copy(self.gm.graph, {})
        g.output(env)
        for node in list(g.nodes):
            if node.op == "call_module" and isinstance(getattr(self.gm, str(node.target), None), EnginePartition) \
                    and not node.kwargs:
                with g.inserting_before(node):
                    part = g.get_attr(node.target)
                    box = g.call_function(_box, tuple(node.args))
                    run = g.call_function(_run_boxed, (part, box))
                node.replace_all_uses_with(run)
                g.erase_node(node)
        g.set_codegen(fx.graph._BoxedCodeGen())
        self._boxed_gm = fx.GraphModule(self.gm, g)
        return True

    def __call__(self, args: list) -> Any:
        boxed = self._boxed_gm
        if boxed is not None:
            return boxed.forward(args)
        if self.frozen:
            cur = self._current
            if cur is None or not cur.holds(args):
                cur = self._select(args)
            active.slot = cur.slot
        if self.gears:
            return self._call_geared(args)
        return self.gm.forward(*args)

    def _call_geared(self, args: list) -> Any:
        """Gears (updraft/gears.py): plan every gear at the first call, pad between gears."""
        for box in list(self.gears):
            if not box.warmed:
                with self._lock:
                    if not box.warmed:
                        self._warm(box, args)
                        box.warmed = True
        if not self.gears:
            return self.gm.forward(*args)
        cuts = []
        for box in self.gears:
            size = box.size_of(args)
            target = box.gear_for(size)
            if target is not None:
                padded = box.resized(args, target)
                if box.fits(padded):  # the graph's shape guards hold for the padded inputs
                    args = padded
                    cuts.append((box, size))
        outs = self.gm.forward(*args)
        for box, size in reversed(cuts):
            outs = box.cut(outs, size)
        return outs

    def _warm(self, box: GearBox, args: list) -> None:
        """Runs the graph once per gear size (builds each partition's plans for it). A size whose
        resized inputs break the graph's shape guards is skipped; a failing run drops the gear
        (warned once): warming is an optimisation and must never fail the user's call."""
        skipped = []
        for size in box.gear.sizes:
            resized = box.resized(args, size)
            if not box.fits(resized):
                skipped.append(size)
                continue
            try:
                self.gm.forward(*resized)
            except Exception as e:
                self.gears.remove(box)
                warn_once(f"[updraft.gears] warming the gear on {box.gear.input!r} dim {box.gear.dim} at size "
                          f"{size} failed ({type(e).__name__}: {str(e)[:200]}); the gear is dropped and the graph "
                          "runs without it. Drop the gear, or report the graph")
                return
        if skipped:
            box.gear_sizes_skipped = skipped
            if self.report is not None:
                self.report.compiles.append(("gears", f"{box.gear.input} sizes {skipped} not planned: "
                                             "the graph's shape guards reject them with this call's other inputs"))

    def _select(self, args: list) -> "_ParamSet":
        """The parameter set of `args`, made current: a kept one as it is, a kept one modified in
        place rebuilt, or a new one (a recompile: the partitions build for it at this call)."""
        with self._lock:
            cur = self._current
            if cur is not None and cur.holds(args):
                return cur
            key = tuple(id(args[i]) for i in self.frozen)
            found = self._sets.get(key)
            if found is not None and found.same_tensors(args):
                self._sets.move_to_end(key)
                if not found.holds(args):
                    self._rebuild(self._what_changed(found.bound, args), found)
                    found.bound = self._bound_of(args)
                new = found
            else:
                new = self._add_set(key, args)
            self._current = new
            return new

    def _add_set(self, key: tuple, args: list) -> "_ParamSet":
        """A set met for the first time. After the first, a recompile (counted against the limit);
        the partitions keep one state per set once there are two."""
        new = _ParamSet(self._next_slot, self._bound_of(args))
        self._next_slot += 1
        cur = self._current
        if cur is not None:
            self._drop_released()
            while len(self._sets) >= self.config.parameter_sets:
                _, old = self._sets.popitem(last=False)
                for p in self.parts:
                    p.invalidate(old.slot)
            kept = len(self._sets)
            reason = self._what_changed(cur.bound, args)
            if kept:
                reason += (f"; built beside {kept} other parameter set(s) it keeps "
                           f"(CompilerConfig.parameter_sets={self.config.parameter_sets})")
                for p in self.parts:
                    p.keep_sets(cur.slot)  # until now the one state belonged to the current set
            if not self._rebuild(reason, None):
                return new
        self._sets[key] = new
        return new

    def _drop_released(self) -> None:
        """Forgets the kept sets whose parameters nobody else holds (the model was deleted): their
        engine states hold the tensors, so they would otherwise stay alive with this graph. Run
        only when a new set arrives (a compile anyway): one scan of the heap per kept set."""
        try:  # every graph's own records: the prefill and decode graphs of one model hold its tensors
            ours = {id(entry) for g in list(_graphs_with_sets) for s in list(g._sets.values()) for entry in s.bound}
        except RuntimeError:  # another thread changed a graph's sets meanwhile: keep everything this time
            return
        for key, s in list(self._sets.items()):
            if s is self._current:
                continue
            holders = gc.get_referrers(s.bound[0][1])
            if all(id(h) in ours or isinstance(h, types.FrameType) for h in holders):
                del self._sets[key]
                for p in self.parts:
                    p.invalidate(s.slot)

    def _bound_of(self, args: list) -> list:
        """(i, tensor, version) per frozen input; for a checked one (a contiguous tensor; another
        keeps the version check alone) also a copy of its bytes, which each call compares, with
        the copy's data_ptr and nbytes (_C.frozen_unchanged)."""
        bound = []
        for i in self.frozen:
            t = args[i]
            if i in self._checked and t.is_contiguous():
                snapshot = t.detach().clone()
                bound.append((i, t, t._version, snapshot, snapshot.data_ptr(), snapshot.nbytes))
            else:
                bound.append((i, t, t._version))
        return bound

    def _what_changed(self, bound: list, args: list) -> str:
        changed = []
        for i, t, v, *snapshot in bound:
            if args[i] is not t:
                changed.append((i, "is another tensor (another module instance?)"))
            elif t._version != v:
                changed.append((i, "was modified in place"))
            elif snapshot and not _entry_holds(args, (i, t, v, *snapshot)):
                changed.append((i, "changed in place without a version bump (batch norm's running statistics, "
                                   "updated by a train-mode forward)"))
        i, how = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        return f"parameter input {i} '{self._names[i]}' {how}{more}"

    def _rebuild(self, reason: str, changed: Optional["_ParamSet"]) -> bool:
        """Frozen parameters changed (`changed`: a kept set modified in place; None: a new set):
        the partitions rebuild for it, unless the recompile limit is hit. False when it was: every
        partition runs in PyTorch from now on."""
        if self.report is not None:
            self.report.compiles.append(("recompile", reason))
        over = self.history is not None and self.history.recompiled(reason, self.config.recompile_limit)
        if not over:
            if changed is not None:
                for p in self.parts:
                    p.invalidate(changed.slot)
            return True
        for p in self.parts:
            p.run_in_pytorch(f"recompile limit ({self.config.recompile_limit}) reached: {reason}")
        self.frozen = []  # the partitions run in PyTorch for good: nothing left to check or rebuild
        self._sets.clear()
        warn_once(f"[updraft.backend] a graph was recompiled {self.history.recompiles} times, over "
                  f"CompilerConfig.recompile_limit={self.config.recompile_limit}; the last change: "
                  f"{reason}. It runs in PyTorch from now on. Avoid changing parameters between "
                  "calls (or compile with freeze=False), or raise the limit.")
        return False


def _entry_holds(args: list, entry: tuple) -> bool:
    """One bound entry checked as the per-call check does (bytes, not values: NaN equals NaN)."""
    return load_c().frozen_unchanged(args, [entry])


class _ParamSet:
    """One set of frozen parameters a PartitionedGraph runs with: its slot (which state each
    partition uses for it) and the tensors with their versions when it was built."""

    __slots__ = ("slot", "bound")

    def __init__(self, slot: int, bound: list) -> None:
        self.slot, self.bound = slot, bound

    def holds(self, args: list) -> bool:
        """args[i] is t and t._version == v for every bound (i, t, v), and t's bytes equal a
        bound snapshot's: in C, one call per call of the graph (a Python loop over MobileNetV2's
        261 parameters took 70-100 us)."""
        return load_c().frozen_unchanged(args, self.bound)

    def same_tensors(self, args: list) -> bool:
        return all(args[e[0]] is e[1] for e in self.bound)


class _History:
    """Compiles of one graph family: the same aten ops in the same order, whatever the sizes.
    Dynamo compiles a function again when a guard fails (new static sizes, dtypes, another
    module instance); each such compile, and each rebuild after frozen parameters changed,
    counts as a recompile against CompilerConfig.recompile_limit."""

    def __init__(self) -> None:
        self.signature: Optional[list] = None  # placeholders of the last compile
        self.recompiles = 0
        self._last_frame_compile = -1
        self._lock = threading.Lock()

    def compiled(self, signature: list, frame_compile: int) -> str:
        """Records a compile of this family (Dynamo's compile number `frame_compile` of the frame,
        0 after torch._dynamo.reset()); returns why it happened ("" for a first compile)."""
        with self._lock:
            if frame_compile <= self._last_frame_compile:  # Dynamo started over (reset)
                self.signature, self.recompiles = None, 0
            self._last_frame_compile = frame_compile
            prev, self.signature = self.signature, signature
            if prev is None:
                return ""
            self.recompiles += 1
        return _describe_change(prev, signature)

    def recompiled(self, reason: str, limit: int) -> bool:
        """Counts a rebuild; True when the family is now over `limit`."""
        with self._lock:
            self.recompiles += 1
            return self.recompiles > limit


_histories: dict = {}
_histories_lock = threading.Lock()


def _history_for(gm: fx.GraphModule) -> tuple[_History, int]:
    """The history of this graph's family within its Dynamo frame, and the frame's compile
    number. Outside a Dynamo compile (a backend called by hand) every call is a first compile."""
    from torch._guards import CompileContext

    cid = CompileContext.current_compile_id()
    if cid is None:
        return _History(), 0
    family = (cid.frame_id, tuple((n.op, str(n.target)) for n in gm.graph.nodes))
    with _histories_lock:
        h = _histories.get(family)
        if h is None:
            h = _histories[family] = _History()
        return h, cid.frame_compile_id


def _signature(gm: fx.GraphModule, names: Optional[list] = None) -> list:
    sig = []
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        name = names[i] if names else n.name
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            sig.append((name, str(v.dtype).replace("torch.", ""), tuple(str(d) for d in v.shape)))
        else:
            sig.append((name, type(v).__name__, ()))
    return sig


def _describe_change(prev: list, now: list) -> str:
    """Which input and which dim changed between two compiles of one graph family."""
    changes = []
    for i, (a, b) in enumerate(zip(prev, now)):
        name = b[0]
        if a[1] != b[1]:
            changes.append(f"input {i} '{name}' dtype {a[1]} -> {b[1]}")
        elif len(a[2]) != len(b[2]):
            changes.append(f"input {i} '{name}' rank {len(a[2])} -> {len(b[2])}")
        else:
            for d, (x, y) in enumerate(zip(a[2], b[2])):
                if x != y:
                    changes.append(f"input {i} '{name}' dim {d} {x} -> {y}")
    if len(prev) != len(now):
        changes.append(f"{len(prev)} -> {len(now)} inputs")
    if not changes:
        return ("same input dtypes and shapes (Dynamo recompiled for another guard, e.g. another "
                "module instance or a changed Python value)")
    return "; ".join(changes[:4]) + (f" (and {len(changes) - 4} more)" if len(changes) > 4 else "")


def _frozen_inputs(gm: fx.GraphModule, config: CompilerConfig) -> list[int]:
    """Indices of gm's placeholders that are parameters/buffers (notes §1.3), less those the
    graph itself writes: a compiled optimizer step updates every parameter and state tensor it
    reads (Dynamo marks them static), and a constant that changes on every call would rebuild
    the engine graph on every call until the recompile limit, then run in PyTorch."""
    if not config.freeze:
        return []
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    idx: set[int] = set()
    mutated: set[int] = set()
    if tc is not None:
        if tc.params_flat:
            idx.update(range(len(tc.params_flat)))
        fw_meta = getattr(tc, "fw_metadata", None)
        if fw_meta is not None and fw_meta.static_input_indices:
            idx.update(fw_meta.static_input_indices)
        for i, info in enumerate(getattr(fw_meta, "input_info", None) or []):
            if info.mutates_data or info.mutates_metadata:
                mutated.add(i)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return sorted(i for i in idx - mutated if i < len(placeholders)
                  and isinstance(placeholders[i].meta.get("val"), torch.Tensor))


# The arguments through which an op reads batch norm's running statistics (every aten batch
# norm overload names them so).
_RUNNING_STATS_ARGS = ("running_mean", "running_var")


def _running_stats_inputs(gm: fx.GraphModule, frozen: list[int]) -> list[int]:
    """The frozen inputs that some node reads as batch norm's running statistics. A train-mode
    forward (eager, or a compiled training graph) updates them in place without bumping their
    version, so the per-call check compares their bytes too (PartitionedGraph), not only their
    version: an eval call after training would otherwise run on statistics the engine folded
    before it (into the convolution's weights, for one)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    by_node = {placeholders[i]: i for i in frozen if i < len(placeholders)}
    found = set()
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for k, arg in enumerate(schema.arguments):
            if arg.name not in _RUNNING_STATS_ARGS:
                continue
            value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
            if value in by_node:
                found.add(by_node[value])
    return sorted(found)


def compile_inference(gm: fx.GraphModule, config: CompilerConfig, report: GraphReport,
                      names: Optional[list] = None) -> Callable:
    history, frame_compile = _history_for(gm)
    reason = history.compiled(_signature(gm, names), frame_compile)
    report.compiles.append(("recompile", reason) if reason else ("compile", "first compile of this graph"))
    if history.recompiles > config.recompile_limit:
        over = (f"compiled {history.recompiles + 1} times, over CompilerConfig.recompile_limit="
                f"{config.recompile_limit}; the last change: {reason}")
        _record_all_in_pytorch(gm, report, f"runs in PyTorch: recompile limit reached: {over}")
        warn_once(f"[updraft.backend] a graph was {over}. It runs in PyTorch from now on. Mark the "
                  "changing dim dynamic (torch._dynamo.mark_dynamic, or torch.compile(dynamic=True)), "
                  "or raise the limit.")
        return _boxed(gm.forward)
    frozen = _frozen_inputs(gm, config)
    checked = _running_stats_inputs(gm, frozen)
    writes = _data_writes()
    gm, parts = partition_graph(gm, config, report, set(frozen))
    if config.debug >= 1:
        print(f"[updraft] inference graph: {report.engine_compute} compute ops in the engine, "
              f"{report.fallback_compute} in PyTorch, {len(parts)} partition(s), "
              f"{len(frozen)} frozen inputs", file=sys.stderr)
        for op, reasons in report.reasons.items():
            print(f"[updraft]   eager {op}: {reasons[0]}", file=sys.stderr)
    if not parts and not config.gears:
        return _boxed(gm.forward)
    _restride_user_outputs(gm, report)
    _write_inputs_in_place(gm, report, writes)
    return PartitionedGraph(gm, parts, frozen, history, config, report, names, checked)


def _restride_user_outputs(gm: fx.GraphModule, report: GraphReport) -> None:
    """The outputs the user sees get eager's strides (partition.restride_outputs): all of an
    inference graph's but the new values of written inputs (copied back into the inputs, any
    layout), a training forward's user outputs but not its saved values (the backward reads
    those in any layout: views_to_reshapes, restride_storage_reads), none of a backward's."""
    if report.kind == "training backward":
        return
    meta, outputs = _fw_metadata(), None
    if meta is not None:
        first = len(meta.mutated_inp_runtime_indices)
        outputs = range(first, first + len(meta.output_info) + meta.num_intermediate_bases)
    if restride_outputs(gm, outputs):
        report.compiles.append((OUTPUT_LAYOUTS, "outputs copied into eager's layout where the engine's differs"))


def _fw_metadata() -> Any:
    """AOTAutograd's metadata of the graph being compiled (read inside a compiler call), or None
    outside one."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    return getattr(tc, "fw_metadata", None) if tc is not None else None


def _data_writes() -> list[tuple[int, int]]:
    """(output k, input i) for each input the graph AOTAutograd is compiling writes (data only,
    no metadata change, and hidden from autograd: an input that requires grad counts only when
    written under no_grad, as an optimizer step writes parameters): output k is the new value
    AOTAutograd copies into input i after the call (its outputs start with the mutated inputs'
    new values, in order)."""
    meta = _fw_metadata()
    if meta is None:
        return []
    pairs = []
    for k, i in enumerate(meta.mutated_inp_runtime_indices):
        info = meta.input_info[i]
        hidden = info.mutations_under_no_grad_or_inference_mode or info.mutations_hidden_from_autograd
        if info.mutates_data and not info.mutates_metadata and not info.mutates_storage_metadata \
                and (hidden or not info.requires_grad):
            pairs.append((k, i))
    return pairs


def _write_inputs_in_place(gm: fx.GraphModule, report: GraphReport, writes: list[tuple[int, int]]) -> None:
    """An input the graph writes (a static KV cache) whose new value is an engine partition's
    output, and which nothing else reads: the partition writes it in place and returns the input
    itself, so AOTAutograd's copy-back (`copy_` of a tensor onto itself) does nothing. Otherwise
    the engine wrote a new tensor of the input's size and AOTAutograd copied it back: two copies
    of the whole cache per layer and step."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    outputs = list(next(iter(gm.graph.find_nodes(op="output"))).args[0])
    times = collections.Counter(id(o) for o in outputs)  # how often each node is returned
    done = []
    for k, i in writes:
        if k >= len(outputs) or i >= len(placeholders) or len(placeholders[i].users) != 1:
            continue
        ph, out = placeholders[i], outputs[k]
        call = next(iter(ph.users))
        part = getattr(gm, str(call.target), None) if call.op == "call_module" else None
        if not isinstance(part, EnginePartition) or times[id(out)] != 1 or call.args.count(ph) != 1:
            continue
        if out is call:
            j = 0
        elif (isinstance(out, fx.Node) and out.op == "call_function" and out.target is operator.getitem
              and out.args[0] is call):
            j = out.args[1]
        else:
            continue
        if part.write_input_in_place(j, call.args.index(ph)):
            done.append(ph.name)
    report.input_writes, report.input_writes_in_place = len(writes), len(done)
    if done:
        # An optimizer step writes hundreds (ViT-B/16's AdamW: 792): the first few name the kind.
        names = ", ".join(done[:_NAMES_SHOWN]) + (f", ... ({len(done)} in all)" if len(done) > _NAMES_SHOWN else "")
        report.compiles.append((INPUT_WRITES, f"inputs written in place by the engine (no copy-back): {names}"))


# Input names a report line lists before it gives the count instead.
_NAMES_SHOWN = 8


def compile_training(gm: fx.GraphModule, config: CompilerConfig, report: GraphReport, kind: str) -> Callable:
    """One graph of a training step (AOTAutograd's forward or backward) into the engine, like an
    inference graph but with nothing frozen: parameters are inputs, since the optimizer updates
    them in place between steps. The forward's saved activations are its extra outputs, fresh
    tensors per call (so a second forward before the first backward, as in gradient
    accumulation, keeps both). Its engine graphs free their arenas after each call (unless
    CompilerConfig.keep_arenas says otherwise). A compile error runs the graph in PyTorch, as
    for inference. (training="auto" times the whole compiled step against eager: `_compile`.)"""
    if kind == "training backward":
        # Its saved inputs come in the engine forward's layout, contiguous where torch's op was
        # not (attention's result), and a view the partition recomputed from one
        # (CompilerConfig.recompute_views) may not apply to that layout; reshape does, wherever
        # the graph or a part of it runs in PyTorch (a fallback, a free view). An as_strided
        # over one gets it in its traced layout (before partitioning, so that a graph left
        # whole to PyTorch has it too).
        views_to_reshapes(gm)
    try:
        if kind == "training backward":
            restride_storage_reads(gm, inputs_too=True)
        keep = False if config.keep_arenas is None else config.keep_arenas  # training frees them: config.py
        compiled = compile_inference(gm, dataclasses.replace(config, freeze=False, keep_arenas=keep), report)
        if kind == "training backward" and config.release_saved and isinstance(compiled, PartitionedGraph) \
                and compiled.release_inputs():
            report.compiles.append((SAVED_INPUTS, "each freed after its last reader, gradients allocated at their "
                                    "first writer (CompilerConfig.release_saved)"))
    except Exception as e:
        if not config.fallback:
            raise
        _record_all_in_pytorch(gm, report, f"compile failed, graph runs in PyTorch: {type(e).__name__}: {e}")
        warn_once(f"[updraft.backend] compiling a {kind} graph failed ({type(e).__name__}: {e}); running it "
                  "in PyTorch. Set CompilerConfig(fallback=False) to raise instead.")
        return _boxed(gm.forward)
    return _boxed_function(compiled)


def _choice_recorder(reports: list, kind: str, sides: tuple, why_pytorch: str) -> Callable:
    """The on_choice of a MeasuredChoice: records both times in each of `reports` under `kind`
    (`sides`: how the updraft and the PyTorch side are named) and, when PyTorch wins, counts
    those graphs' engine ops in PyTorch with `why_pytorch` (formatted with engine_ms and
    pytorch_ms)."""
    def on_choice(chosen: str, engine_ms: float, pytorch_ms: float) -> None:
        where = sides[0] if chosen == "engine" else sides[1]
        timed = (f"timed over its first calls (median of {TRIALS} each): {sides[0]} {engine_ms:.2f} ms, "
                 f"{sides[1]} {pytorch_ms:.2f} ms" if not (math.isnan(engine_ms) or math.isnan(pytorch_ms)) else
                 f"not timed: {SETUP_STREAK_LIMIT} engine calls in a row built or instantiated a plan "
                 "(a new input shape each call)")
        for report in reports:
            report.compiles.append((kind, f"{timed}; runs in {where}"))
            if chosen == "pytorch":
                report.move_to_fallback([op for p in report.partitions for op in p.ops],
                                        why_pytorch.format(engine_ms=engine_ms, pytorch_ms=pytorch_ms))
    return on_choice


def _record_all_in_pytorch(gm: fx.GraphModule, graph_report: GraphReport, reason: str) -> None:
    """The whole graph runs in PyTorch: every op is a fallback, with `reason`."""
    from .lowering import is_compute, op_name

    graph_report.note = reason
    # Anything partitioning recorded before the failure no longer runs in the engine.
    graph_report.engine_ops.clear()
    graph_report.engine_compute = 0
    graph_report.partitions.clear()
    for n in gm.graph.nodes:
        if n.op == "call_function":
            graph_report.add_fallback(op_name(n), reason, is_compute(n), node=n.name)


def _keep_freed_memory(config: CompilerConfig, report: GraphReport, training: bool) -> None:
    """The process's malloc set to keep freed memory, where the config asks (host_memory.py);
    the report says what it does."""
    note = host_memory.keep_freed_memory(config.keep_freed_memory, training)
    if note is not None:
        report.compiles.append((HOST_MEMORY, note))


def _make_compilers(config: CompilerConfig, input_names: Optional[list] = None, dump: Any = None,
                    seen: Optional[dict] = None) -> dict:
    """`input_names`: the Dynamo graph's placeholder names (L_x_, L_self_..._weight_), which
    AOTAutograd's flat inputs follow in order; messages use them. `dump`: the graph's
    updraft.debug.dump.GraphDump (CompilerConfig.dump_dir), or None. `seen`: filled with what
    the caller needs to know of the inference graph ("report"; "mutates_inputs": the graph
    writes some of its inputs)."""
    rep = report_for_new_graph()

    def inference_compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
        graph_report = rep.new_graph("inference")
        if seen is not None:
            seen["report"], seen["mutates_inputs"] = graph_report, _mutates_inputs()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        names = input_names if input_names and len(input_names) == len(placeholders) else None
        aot = dump.aot_graph("inference", gm) if dump is not None else None
        engine_rng_in(gm)
        _keep_freed_memory(config, graph_report, training=False)
        try:
            compiled = compile_inference(gm, config, graph_report, names)
        except Exception as e:
            if not config.fallback:
                raise
            _record_all_in_pytorch(gm, graph_report,
                                   f"compile failed, graph runs in PyTorch: {type(e).__name__}: {e}")
            warn_once(f"[updraft.backend] compiling a graph failed ({type(e).__name__}: {e}); "
                      "running it in PyTorch. Set CompilerConfig(fallback=False) to raise instead.")
            compiled = _boxed(gm.forward)
        if aot is not None:
            aot.finish(compiled, graph_report)
        return compiled

    def training_compiler(kind: str) -> Callable:
        def compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
            aot = dump.aot_graph(kind, gm) if dump is not None else None
            graph_report = rep.new_graph(kind)
            if seen is not None:
                seen.setdefault("training_reports", []).append(graph_report)
            if config.training == "pytorch":
                _record_all_in_pytorch(gm, graph_report, _TRAINING_NOTE)
                compiled = _boxed(gm.forward)
            else:
                if kind == "training forward":  # a backward reuses the forward's masks
                    engine_rng_in(gm)
                    if seen is not None and "saved" in seen:
                        graph_report.compiles.append((SAVED_INPUTS, seen.pop("saved")))
                _keep_freed_memory(config, graph_report, training=True)
                compiled = compile_training(gm, config, graph_report, kind)
            if aot is not None:
                aot.finish(compiled, graph_report)
            return compiled
        return compiler

    return dict(fw_compiler=training_compiler("training forward"),
                bw_compiler=training_compiler("training backward"),
                inference_compiler=inference_compiler)


# What CompilerConfig.recompute_norms adds to torch's recompute allowlist (op packets, as the
# partitioner compares them).
RECOMPUTED_NORMS = (torch.ops.aten.native_layer_norm,)


def _torch_setting(**settings) -> Callable:
    """A rule's change that is one of torch's partitioner settings (torch._functorch.config),
    patched for the call. (Each change returns a context manager, or None where this torch
    cannot make it: the rule is then left out, of the partition and of its report line.)"""
    def change(partitioners):
        from torch._functorch import config as functorch_config
        return functorch_config.patch(**settings)
    return change


def _allow_norms(partitioners):
    """torch's op list with RECOMPUTED_NORMS added to its recomputable (and fusible) ops. The list
    is built once per min-cut solve, so the patch covers this partition alone. A torch without
    that function (not the pinned one): None, it partitions by its own rule."""
    torch_op_list = getattr(partitioners, "get_default_op_list", None)
    if torch_op_list is None:
        return None

    def op_list():
        ops = torch_op_list()
        for op in RECOMPUTED_NORMS:
            ops.recomputable_ops.add(op)
            ops.fusible_ops.add(op)
        return ops
    return unittest.mock.patch.object(partitioners, "get_default_op_list", op_list)


# The engine's recompute rules for training partitions: CompilerConfig's bool field, the change
# to torch's min-cut partitioner for the call (a context manager over torch._functorch.partitioners),
# and what the forward's report line says of it. Otherwise torch's setting, whatever the user made it.
RECOMPUTE_RULES = (
    ("recompute_pointwise", _torch_setting(ban_recompute_materialized_backward=False),
     "pointwise values a backward matmul or convolution reads are recomputed there"),
    ("recompute_norms", _allow_norms, "layer norms are recomputed from their input"),
    ("recompute_views", _torch_setting(recompute_views=True),
     "views are recomputed, not saved beside what they view"),
)


def partitioner(config: CompilerConfig, for_engine: bool, seen: Optional[dict] = None) -> Callable:
    """AOTAutograd's partition function for a training graph: torch's min-cut partitioner, which
    saves for the backward what is cheapest to keep and recomputes cheap elementwise values and
    views there instead (docs/training.md, "What the forward saves"), with the engine's rules
    (RECOMPUTE_RULES) for graphs headed for the engine.

    torch bans recomputing a value that a matmul or convolution in the backward reads
    (`ban_recompute_materialized_backward`): for Inductor that value must then be written to
    memory in the backward too, so recomputing saves no traffic. For the engine it saves memory
    held from the forward to the backward at the cost of one elementwise pass over an input
    that is saved anyway (GELU's output from its linear's output), and the forward no longer
    writes that value out (steps measured level): CompilerConfig.recompute_pointwise lifts it.
    CompilerConfig.recompute_norms adds layer norm to torch's allowlist of cheap ops: its output
    is what the next linear's weight gradient reads, and its input (the residual stream) is
    saved for its own backward anyway. CompilerConfig.recompute_views recomputes views rather
    than saving them: the engine writes each forward output to a tensor of its own, so a saved
    view of a saved value would be a second copy where eager keeps one storage. What may be
    recomputed is otherwise torch's rule (its allowlist, no reductions, no random ops, no long
    chains). `seen`: gets "saved", what the forward keeps for the backward
    (`saved_for_backward`), for the forward graph's report."""
    from torch._functorch import partitioners

    rules = [r for r in RECOMPUTE_RULES if for_engine and getattr(config, r[0])]

    def partition(joint_module, joint_inputs, **kwargs):
        applied = []
        with contextlib.ExitStack() as stack:
            for knob, change, said in rules:
                patch = change(partitioners)
                if patch is not None:
                    stack.enter_context(patch)
                    applied.append(f"{said} (CompilerConfig.{knob})")
            fw, bw = partitioners.min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)
        if seen is not None:
            seen["saved"] = saved_for_backward(fw, kwargs["num_fwd_outputs"], applied)
        return fw, bw

    return partition


def saved_for_backward(fw: fx.GraphModule, num_fwd_outputs: int, rules: list) -> str:
    """The forward graph's report line on what it saves for the backward: the tensors it computes
    for it (its outputs after the step's own, less its inputs passed through, such as parameters),
    their bytes where sizes are static, and the recompute rules in force."""
    out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
    vals = [a.meta.get("val") for a in out[num_fwd_outputs:]
            if isinstance(a, fx.Node) and a.op != "placeholder"]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    static = [v for v in tensors if all(isinstance(d, int) for d in v.shape)]
    size = sum(v.numel() * v.element_size() for v in static)
    mb = f"{size / 2**20:.1f} MB" + ("" if len(static) == len(tensors) else " and tensors of symbolic size")
    rule = "; ".join(rules) or "torch's recompute rule"
    return (f"the forward keeps {len(tensors)} tensors for the backward, {mb} (inputs such as parameters "
            f"not counted); {rule}")


def _compile(gm: fx.GraphModule, example_inputs: list, config: CompilerConfig) -> Callable:
    from torch._dynamo.backends.common import aot_autograd

    if torch._functorch.config.force_autograd_cache:  # maybe torch's aot_compile: precompile.py
        from . import precompile

        if precompile.requested():
            return precompile.capture(gm, example_inputs, config)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    dump = None
    if config.dump_dir:
        from .debug.dump import GraphDump

        dump = GraphDump.start(config, gm)
    training = is_training(example_inputs)
    eager = eager_copy(gm) if training and config.training == "auto" else None
    # The rewrites for the engine; training="pytorch" keeps torch's flash attention and batch norm.
    for_engine = training and config.training != "pytorch"
    if for_engine:
        attention_as_math_in(gm)
    seen: dict = {}
    backend = aot_autograd(decompositions=decompositions(),
                           partition_fn=partitioner(config, for_engine, seen),
                           **_make_compilers(config, names, dump, seen))
    compiled = backend(gm, example_inputs)
    if eager is not None:
        return _training_step_timed_against_eager(compiled, eager, seen)
    # activation_dtype changes only linears over int8 weights, which come from one of these two
    # rules' cases: alone (f32 weights) it changes nothing, and the graph is timed as any other.
    if config.weight_dtype != "f32" and _has_engine_partitions(seen.get("report")):
        return _low_precision_untimed(compiled, seen["report"], config)
    if _has_engine_partitions(seen.get("report")) and any(p.compact_weights for p in seen["report"].partitions):
        return _compact_weights_untimed(compiled, seen["report"], config)
    if seen.get("mutates_inputs") and config.inference == "auto":
        return _timed_against_eager(compiled, gm, seen["report"])
    if config.inference == "auto" and _has_engine_partitions(seen.get("report")):
        return _inference_timed_against_eager(compiled, gm, seen["report"])
    return compiled


def _low_precision_untimed(compiled: Callable, report: GraphReport, config: CompilerConfig) -> Callable:
    """CompilerConfig(weight_dtype="bf16"/"int8", with or without activation_dtype="int8"): the
    engine runs every call. Eager PyTorch computes with the f32 weights and activations, a
    different result, so timing the two (inference="auto", or a graph that writes its inputs,
    such as a static KV cache) would switch the model's precision between calls during the
    trials and could keep f32 for good, silently: greedy tokens would depend on the timing. It
    also ran Dynamo's graph eagerly for the first time inside a user's call (a 32-token prompt of
    a 156M Llama: 0.2 s became 0.7-1.2 s)."""
    what = [f"{k}={getattr(config, k)!r}" for k in ("weight_dtype", "activation_dtype") if getattr(config, k) != "f32"]
    report.compiles.append((INFERENCE_CHOICE, f"not timed against eager PyTorch: {' and '.join(what)} "
                                              "computes with other numbers than eager; runs in updraft"))
    return compiled


def _compact_weights_untimed(compiled: Callable, report: GraphReport, config: CompilerConfig) -> Callable:
    """A graph over the model's own int8/int4/bf16 weights (updraft.quantize_weights, or a module
    that dequantises its own weights) runs in the engine at every call, untimed. Eager computes
    the same values (unless activation_dtype="int8" quantises x as well), but its trials would
    cost the first requests far more than they could find: on the 156M Llama's int8 model,
    eager's `aten._weight_int8pack_mm` took 1.9 s for a 32-token prefill against the engine's
    58 ms (4 trials: 7.7 s), and widening each weight to f32 instead raised the peak RSS by
    0.23 GB, 1.5x the whole int8 model (docs/BENCHMARKS.md, "Issue 20: the model's own int8
    weights")."""
    n = sum(p.compact_weights for p in report.partitions)
    report.compiles.append((INFERENCE_CHOICE, f"not timed against eager PyTorch: the engine reads {n} of the "
                                              "model's own int8/int4/bf16 weights in place, where eager's int8 or int4 matmul "
                                              "or f32 widening is many times slower"
                                              + (f", and activation_dtype={config.activation_dtype!r} computes with "
                                                 "other numbers than eager" if config.activation_dtype != "f32" else "")
                                              + "; runs in updraft"))
    return compiled


def _choosing(choice: MeasuredChoice, compiled: Callable) -> Callable:
    """The callable Dynamo gets for a graph whose calls `choice` routes (engine or eager)."""
    def run(*args: Any) -> Any:
        return choice(list(args))
    run.__wrapped__ = compiled
    return run


def _has_engine_partitions(report: Optional[GraphReport]) -> bool:
    """Whether any of the graph runs in the engine (else there is nothing to time against eager)."""
    return report is not None and bool(report.partitions) and not report.note


def _inference_timed_against_eager(compiled: Callable, gm: fx.GraphModule, report: GraphReport) -> Callable:
    """CompilerConfig(inference="auto"): "never slower than eager", checked where it is cheap
    and sure. The engine's own choices (kernels, partition costs) are predictions; this times
    the compiled graph against Dynamo's graph run eagerly over the first calls (MeasuredChoice,
    prefer_engine=True: PyTorch only when clearly faster) and the report says which runs."""
    on_choice = _choice_recorder([report], INFERENCE_CHOICE, ("updraft", "eager PyTorch"),
                                 "CompilerConfig(inference=\"auto\"): eager PyTorch ran this graph faster in every "
                                 "trial (median {pytorch_ms:.2f} ms against updraft's {engine_ms:.2f} ms)")

    def engine_setup() -> int:  # plans built or instantiated so far (a call at a new shape)
        return sum(p.plans_built + p.plans_instantiated + p.engine_compiles for p in report.partitions)
    choice = MeasuredChoice(lambda args: compiled(*args), lambda args: gm.forward(*args), on_choice,
                            prefer_engine=True, engine_setup=engine_setup)
    return _choosing(choice, compiled)


def _training_step_timed_against_eager(compiled: Callable, eager: fx.GraphModule, seen: dict) -> Callable:
    """CompilerConfig(training="auto"): the compiled step (AOTAutograd's forward and backward,
    in the engine) and Dynamo's graph run eagerly (torch's own kernels and autograd) are timed,
    forward plus backward, over the first steps (MeasuredChoice, backward=True); the faster runs
    from then on. Eager is the baseline the rule "never slower than eager by choice" names: many
    of the engine's backward ops are decompositions (attention's, layer norm's), and on some
    models (ViT, GPT-2) the whole compiled step measured slower (docs/training.md)."""
    # The list the training compilers fill: the backward graph compiles at the first backward,
    # after this wrapper is made, and is in the list by the time the choice is.
    reports = seen.setdefault("training_reports", [])
    on_choice = _choice_recorder(reports, TRAINING_CHOICE, ("updraft", "eager PyTorch"),
                                 "CompilerConfig(training=\"auto\"): eager PyTorch ran the training step faster "
                                 "({pytorch_ms:.2f} ms against updraft's {engine_ms:.2f} ms, forward + backward)")
    choice = MeasuredChoice(lambda args: compiled(*args), lambda args: eager.forward(*args), on_choice, backward=True)
    return _choosing(choice, compiled)


def _mutates_inputs() -> bool:
    """Whether the graph AOTAutograd is compiling writes any of its inputs (its metadata, read
    inside a compiler call)."""
    meta = _fw_metadata()
    return any(i.mutates_data or i.mutates_metadata for i in (getattr(meta, "input_info", None) or []))


def _timed_against_eager(compiled: Callable, gm: fx.GraphModule, report: GraphReport) -> Callable:
    """An inference graph that writes its inputs (a compiled optimizer step, in-place buffer
    updates): AOTAutograd makes the writes new outputs and copies them back after every call,
    where eager writes in place, so even a faster engine may lose to eager (measured on an
    AdamW step over 2.1M parameters: the engine plus copy-back 31.2 ms, Dynamo's graph run in
    place 14.5 ms; docs/training.md). The compiled call and Dynamo's graph run eagerly are timed
    over the first calls (MeasuredChoice) and the faster keeps the graph; the report says which."""
    copy_back = not report.input_writes_in_place or report.input_writes > report.input_writes_in_place
    on_choice = _choice_recorder([report], INPUT_WRITES, ("updraft (engine + copy-back)" if copy_back else
                                                          "updraft (engine, in place)", "eager PyTorch (in place)"),
                                 "the graph writes its inputs and eager PyTorch ran it faster in place "
                                 "({pytorch_ms:.2f} ms against {engine_ms:.2f} ms compiled)")
    choice = MeasuredChoice(lambda args: compiled(*args), lambda args: gm.forward(*args), on_choice)
    return _choosing(choice, compiled)


def get_backend(config: Optional[CompilerConfig] = None) -> Callable:
    """A torch.compile backend using `config` (default: CompilerConfig())."""
    if config is None:
        config = CompilerConfig()
    if not isinstance(config, CompilerConfig):
        raise TypeError(f"[updraft.backend] get_backend takes a CompilerConfig, got {type(config).__name__}")

    def updraft(gm: fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
        if kwargs.get("options"):
            raise TypeError("[updraft.backend] pass options in the CompilerConfig given to "
                            "get_backend, not in torch.compile(options=...)")
        return _compile(gm, example_inputs, config)

    updraft.config = config
    return updraft


def updraft_backend(gm: fx.GraphModule, example_inputs: list, options: Optional[dict] = None,
                    mode: Optional[str] = None, **kwargs: Any) -> Callable:
    """Entry point `torch.compile(..., backend="updraft", options={...})`."""
    if mode not in (None, "default"):
        warn_once(f"[updraft.backend] torch.compile mode={mode!r} is ignored; use options=")
    config = CompilerConfig.from_options({**(options or {}), **kwargs})
    return _compile(gm, example_inputs, config)
