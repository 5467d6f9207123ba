"""What the backend decided, in a form a user can read: `updraft.explain(...)`, `last_report()`.

A Report covers one torch.compile call site (or one `explain` run): one GraphReport per aten
graph AOTAutograd handed to the backend (inference, or training forward/backward), each with
its partitions and, per op that stayed in PyTorch, the reasons.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import warnings
from typing import Optional

from .config import INT4_ROWS_RULE

_warned: set = set()
_warn_lock = threading.Lock()
# The engine's names of stored integer weights (PartitionReport.low_precision_weights keys) and
# what the report calls them: the weights int8 activations multiply (activation_dtype).
_INTEGER_WEIGHTS = {"i8": "int8", "i4": "int4"}


def warn_once(msg: str) -> None:
    """A RuntimeWarning, once per distinct message in this process (a partition that fails is
    called again and again; its user needs to hear it once)."""
    with _warn_lock:
        if msg in _warned:
            return
        _warned.add(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


# GraphReport.compiles kinds that record a decision, not a compile: which of the engine and
# PyTorch runs a graph, timed over its first calls (updraft/training.py, MeasuredChoice), and
# the saved activations (what a forward keeps for its backward and under which recompute rules,
# backend.RECOMPUTE_RULES; what a backward does with them, CompilerConfig.release_saved),
# what the process's malloc does with freed memory (CompilerConfig.keep_freed_memory), and
# which outputs are copied into eager's strides (partition.restride_outputs).
TRAINING_CHOICE, INPUT_WRITES, INFERENCE_CHOICE = "training choice", "input-writing graph", "inference choice"
SAVED_INPUTS, HOST_MEMORY, OUTPUT_LAYOUTS = "saved activations", "host memory", "output layouts"
DECISIONS = (TRAINING_CHOICE, INPUT_WRITES, INFERENCE_CHOICE, SAVED_INPUTS, HOST_MEMORY, OUTPUT_LAYOUTS)


@dataclasses.dataclass
class PartitionReport:
    name: str
    num_ops: int
    num_compute_ops: int
    status: str = "pending"  # pending (built at first call) | ok | failed: <reason>
    compile_ms: float = 0.0  # engine compile (C.compile) time
    lower_ms: float = 0.0    # Python lowering time
    num_inputs: int = 0
    num_constants: int = 0
    # Dynamic shapes: engine compiles (1 unless rebuilt after a parameter change) vs plans
    # built (one per input-shape signature, over the same compile).
    engine_compiles: int = 0
    plans_built: int = 0
    # Range plans (CompilerConfig.range_plans): plans made from a size bucket's template without
    # a build, and the engine's state: "" (no symbolic sizes), "on", or why it is off.
    plans_instantiated: int = 0
    range_plans: str = ""
    plan_ms: float = 0.0  # total Plan::build time
    plan_cpu_ms: float = 0.0  # the same in the building thread's CPU time (load does not inflate it)
    # Kernels the plans made vs took from the compile's kernel cache (new shapes reuse most).
    kernels_created: int = 0
    kernels_reused: int = 0
    # relu / clamp epilogues run as oneDNN post-ops on calls whose scanned inputs are finite
    # (docs/decisions.md): the latest plan's kernels with that form, and the inputs it scans.
    finite_kernels: int = 0
    finite_scanned: int = 0
    # Persistent compile cache: "" (off), "hit", "miss, stored", "rebuilt: <why>, stored", ...
    cache: str = ""
    cache_ms: float = 0.0  # on a hit: key + load + refit, the whole build
    # On a hit with folded constants: "mapped" (stored ones, the weights matched their
    # fingerprints) or "replayed" (recomputed from the recipes: other weights).
    cache_folds: str = ""
    # Bytes of the engine graph's constants by owner (Executable.constant_bytes): "param" (the
    # caller's parameters, read in place: no copy), "folded" (computed from parameters by a
    # pass: engine-owned), "literal". Prepacked copies are process-wide: weight_stats().
    constant_bytes: dict = dataclasses.field(default_factory=dict)
    # Engine passes CompilerConfig.disable_passes switched off in this partition's compile.
    skipped_passes: list = dataclasses.field(default_factory=list)
    # CompilerConfig.weight_dtype, and the linear weights the engine reads low-precision (stored
    # so by the quantize_weights pass, or by the model itself: updraft.quantize_weights):
    # {weight dtype: (count, bytes stored with scales, bytes as f32)} (docs/quantization.md).
    weight_dtype: str = "f32"
    low_precision_weights: dict = dataclasses.field(default_factory=dict)
    # linear_wq nodes that quantise x to int8 at every call (CompilerConfig.activation_dtype).
    int8_activations: int = 0
    # Frozen int8/bf16 parameters the partition widens to f32 (a model quantised in place by
    # updraft.quantize_weights): known when the partition is made, before its engine compile.
    compact_weights: int = 0
    # The partition's ops [(aten op name, is compute)] and the graph report counting them: a
    # partition that fails moves its ops from the engine's count to the fallback's (fail()).
    ops: list = dataclasses.field(default_factory=list, repr=False)
    graph: Optional["GraphReport"] = dataclasses.field(default=None, repr=False)

    def fail(self, reason: str) -> None:
        """This partition runs in PyTorch from now on because of `reason`."""
        first = not self.status.startswith("failed")
        self.status = f"failed: {reason}"
        if first and self.graph is not None:
            self.graph.move_to_fallback(self.ops, f"its engine partition failed: {reason}")


@dataclasses.dataclass
class GraphReport:
    kind: str  # "inference", "training forward", "training backward"
    engine_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    fallback_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    engine_compute: int = 0
    fallback_compute: int = 0
    reasons: dict = dataclasses.field(default_factory=dict)  # op name -> list of distinct reasons
    partitions: list = dataclasses.field(default_factory=list)
    partition_ms: float = 0.0
    note: str = ""  # why the whole graph runs eagerly, when it does
    # Size arithmetic on SymInts (operator.add, sym_size): runs in Python, counted apart.
    shape_ops: int = 0
    # Views of engine outputs whose users all run in PyTorch, left there (free; see
    # partition._leave_views_to_pytorch): not a fallback.
    free_views: int = 0
    # Partitions the cost rule left to PyTorch, each with its estimate (partition_cost.py).
    cost_notes: list = dataclasses.field(default_factory=list)
    # Recompilation: "first compile", or what changed since this graph's previous compile
    # (Dynamo recompiled it, or its parameters changed and the partitions were rebuilt).
    compiles: list = dataclasses.field(default_factory=list)  # [(kind, reason)]
    # Per aten node left to PyTorch (by FX name): why (graph dumps, updraft/debug/dump.py).
    node_reasons: dict = dataclasses.field(default_factory=dict, repr=False)
    # Inputs the graph writes: how many, and how many the engine writes in place (no copy-back;
    # backend._write_inputs_in_place).
    input_writes: int = 0
    input_writes_in_place: int = 0

    def add_fallback(self, op: str, reason: str, compute: bool, node: str = "") -> None:
        if node:
            self.node_reasons[node] = reason
        self.fallback_ops[op] += 1
        if compute:
            self.fallback_compute += 1
        reasons = self.reasons.setdefault(op, [])
        if reason not in reasons and len(reasons) < 5:
            reasons.append(reason)

    def add_engine(self, op: str, compute: bool) -> None:
        self.engine_ops[op] += 1
        if compute:
            self.engine_compute += 1

    def add_shape_arithmetic(self) -> None:
        self.shape_ops += 1

    def add_free_view(self) -> None:
        self.free_views += 1

    def move_to_fallback(self, ops: list, reason: str) -> None:
        """Ops counted in the engine that run in PyTorch after all (their partition failed)."""
        for op, compute in ops:
            if self.engine_ops[op] > 0:
                self.engine_ops[op] -= 1
                if self.engine_ops[op] == 0:
                    del self.engine_ops[op]
            if compute:
                self.engine_compute -= 1
            self.add_fallback(op, reason, compute)


class Report:
    """Everything compiled for one call site; printable."""

    def __init__(self) -> None:
        self.graphs: list[GraphReport] = []
        self._lock = threading.Lock()

    def new_graph(self, kind: str) -> GraphReport:
        g = GraphReport(kind)
        with self._lock:
            self.graphs.append(g)
        return g

    # -- totals
    @property
    def engine_ops(self) -> collections.Counter:
        return sum((g.engine_ops for g in self.graphs), collections.Counter())

    @property
    def fallback_ops(self) -> collections.Counter:
        return sum((g.fallback_ops for g in self.graphs), collections.Counter())

    @property
    def num_engine_compute(self) -> int:
        return sum(g.engine_compute for g in self.graphs)

    @property
    def num_fallback_compute(self) -> int:
        return sum(g.fallback_compute for g in self.graphs)

    @property
    def coverage(self) -> float:
        """Fraction of compute ops (not views/getitems) that run in the engine."""
        total = self.num_engine_compute + self.num_fallback_compute
        return 1.0 if total == 0 else self.num_engine_compute / total

    def compute_by_kind(self) -> dict:
        """Compute ops per graph kind ("inference", "training forward", "training backward"):
        {kind: (in the engine, in PyTorch)}; a training step's forward and backward count apart."""
        out: dict = {}
        for g in self.graphs:
            eng, fb = out.get(g.kind, (0, 0))
            out[g.kind] = (eng + g.engine_compute, fb + g.fallback_compute)
        return out

    @property
    def reasons(self) -> dict:
        out: dict = {}
        for g in self.graphs:
            for op, rs in g.reasons.items():
                for r in rs:
                    if r not in out.setdefault(op, []):
                        out[op].append(r)
        return out

    @property
    def partitions(self) -> list:
        return [p for g in self.graphs for p in g.partitions]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def compile_ms(self) -> float:
        """Partitioning + lowering + engine compile time (engine graphs are built at first call)."""
        return sum(g.partition_ms for g in self.graphs) + sum(
            p.compile_ms + p.lower_ms for p in self.partitions)

    @property
    def engine_compiles(self) -> int:
        return sum(p.engine_compiles for p in self.partitions)

    @property
    def recompiles(self) -> list:
        """(kind, reason) of every recompile recorded here, in order (not the first compiles,
        nor the measured choices between the engine and PyTorch: `DECISIONS`)."""
        return [c for g in self.graphs for c in g.compiles if c[0] != "compile" and c[0] not in DECISIONS]

    @property
    def cache_hits(self) -> int:
        return sum(1 for p in self.partitions if p.cache == "hit")

    @property
    def cache_misses(self) -> int:
        return sum(1 for p in self.partitions if p.cache.startswith(("miss", "rebuilt")))

    @property
    def plans_built(self) -> int:
        return sum(p.plans_built for p in self.partitions)

    @property
    def weights(self) -> dict:
        """Weight bytes: this report's partitions' constants by owner (the caller's parameters read
        in place, engine-owned folded values, literals), and the process's prepacked copies
        (`weight_stats()`: one per weight and layout, shared by every compiled graph)."""
        d = {"param_bytes": 0, "folded_bytes": 0, "literal_bytes": 0}
        for p in self.partitions:
            for k, v in p.constant_bytes.items():
                d[f"{k}_bytes"] = d.get(f"{k}_bytes", 0) + v
        d["packed"] = weight_stats()
        d["engine_bytes"] = d["folded_bytes"] + d["packed"].get("bytes", 0)
        return d

    @property
    def failed_partitions(self) -> list:
        return [p for p in self.partitions if p.status.startswith("failed")]

    def summary(self) -> str:
        """Two lines: coverage and what fell back (the full text is str(report))."""
        eng, fb = self.num_engine_compute, self.num_fallback_compute
        line = (f"updraft: {eng}/{eng + fb} compute ops in the engine ({100 * self.coverage:.1f}%), "
                f"{self.num_partitions} partition(s), compile {self.compile_ms:.1f} ms")
        fb_ops = self.fallback_ops
        if fb_ops:
            line += "\n  in PyTorch: " + ", ".join(f"{op} x{n}" for op, n in fb_ops.most_common(8))
        return line

    def __str__(self) -> str:
        lines = ["updraft report"]
        if not self.graphs:
            lines.append("  no graphs were compiled (did the call run, or hit a cached compile?)")
            return "\n".join(lines)
        eng, fb = self.num_engine_compute, self.num_fallback_compute
        lines.append(f"  graphs: {len(self.graphs)}   partitions: {self.num_partitions}   "
                     f"compile: {self.compile_ms:.1f} ms")
        lines.append(f"  compute ops in engine: {eng}/{eng + fb} ({100 * self.coverage:.1f}%)   "
                     f"ops in eager PyTorch: {sum(self.fallback_ops.values())}")
        by_kind = self.compute_by_kind()
        if len(by_kind) > 1 or "inference" not in by_kind:
            lines.append("  by graph kind: " + ", ".join(f"{kind} {e}/{e + f}" for kind, (e, f) in by_kind.items()))
        for i, g in enumerate(self.graphs):
            lines.append(f"  graph {i} ({g.kind}): engine {sum(g.engine_ops.values())} ops, "
                         f"eager {sum(g.fallback_ops.values())} ops, {len(g.partitions)} partition(s)")
            if g.note:
                lines.append(f"    note: {g.note}")
            if g.shape_ops:
                lines.append(f"    size arithmetic on SymInts in Python: {g.shape_ops} node(s) (not counted as ops)")
            if g.free_views:
                lines.append(f"    views taken in PyTorch, where they are free: {g.free_views}")
            for note in g.cost_notes:
                lines.append(f"    cost rule: {note}")
            for kind, reason in g.compiles:
                lines.append(f"    {kind}: {reason}")
            for p in g.partitions:
                lines.append(f"    {p.name}: {p.num_ops} ops ({p.num_compute_ops} compute), "
                             f"{p.num_inputs} inputs, {p.num_constants} constants, {p.status}, "
                             f"lower {p.lower_ms:.1f} ms, engine compile {p.compile_ms:.1f} ms"
                             f" (x{p.engine_compiles}), {p.plans_built} plan(s) {p.plan_ms:.1f} ms"
                             f" ({p.kernels_created} kernels made, {p.kernels_reused} reused)"
                             + (f", cache {p.cache}" if p.cache else "")
                             + (f" (folds {p.cache_folds})" if p.cache_folds else "")
                             + (f", passes skipped (disable_passes): {', '.join(p.skipped_passes)}"
                                if p.skipped_passes else ""))
                if p.plans_instantiated or p.range_plans not in ("", "on"):
                    lines.append(f"      range plans: {p.plans_instantiated} size(s) run on a bucket's plan "
                                 f"without a build" if p.range_plans == "on"
                                 else f"      range plans off, one plan per size: {p.range_plans}")
                if p.finite_kernels:
                    lines.append(f"      relu/clamp as oneDNN post-ops in {p.finite_kernels} kernel(s): "
                                 + (f"on calls whose {p.finite_scanned} scanned input(s) hold no NaN or inf; "
                                    "on other calls after the primitive, keeping NaN" if p.finite_scanned else
                                    "not taken, scanning the inputs would cost more than the passes it saves"))
        low = [p for p in self.partitions if p.weight_dtype != "f32" or p.low_precision_weights]
        if low:
            count = stored = as_f32 = 0
            stored_as: collections.Counter = collections.Counter()  # engine dtype name -> weights
            for p in low:
                for d, (c, b, f) in p.low_precision_weights.items():
                    count, stored, as_f32 = count + c, stored + b, as_f32 + f
                    stored_as[d] += c
            dtypes = sorted({p.weight_dtype for p in low if p.weight_dtype != "f32"})
            # weight_dtype quantised f32 weights in the engine; otherwise the model stores them so
            # itself (updraft.quantize_weights) and the engine reads them in place. int4 stores a
            # weight whose rows do not fill whole blocks as int8: the split says so.
            split = ""
            if len(stored_as) > 1:
                why = f"; {INT4_ROWS_RULE}" if "int4" in dtypes and "i8" in stored_as else ""
                split = f" ({', '.join(f'{n} {_INTEGER_WEIGHTS.get(d, d)}' for d, n in sorted(stored_as.items()))}{why})"
            # Both at once: weight_dtype over a model that holds some compact weights itself.
            own_count = sum(p.compact_weights for p in low)
            own = f", {own_count} of them the model's own (updraft.quantize_weights)" if dtypes and own_count else ""
            origin = (f"weight_dtype {', '.join(dtypes)}: {count} linear weight(s) stored low-precision{split}{own}" if dtypes else
                      f"the model's own {', '.join(sorted({_INTEGER_WEIGHTS.get(d, d) for p in low for d in p.low_precision_weights}))} "
                      f"weights: {count} linear weight(s) read low-precision in place")
            lines.append(f"  weights: {origin}, {stored / 1e6:.1f} MB with scales ({as_f32 / 1e6:.1f} MB as f32); "
                         "the rest f32 (docs/quantization.md)")
        q = sum(p.int8_activations for p in self.partitions)
        if q:
            kinds = sorted({_INTEGER_WEIGHTS[d] for p in self.partitions for d in p.low_precision_weights
                            if d in _INTEGER_WEIGHTS}) or ["int8"]
            lines.append(f"  activations: int8 per row in {q} linear(s) over {'/'.join(kinds)} weights (activation_dtype int8), "
                         "int32 sums; the rest f32 (error measured: docs/quantization.md, \"int8 activations\")")
        i4 = sum(p.low_precision_weights["i4"][0] for p in self.partitions if "i4" in p.low_precision_weights)
        if i4 and not q:  # the f32-x int4 tiles: the slower pair, for no accuracy (docs/quantization.md)
            lines.append(f"  activations: f32 over {i4} int4 weight(s); activation_dtype=\"int8\" is the faster pair "
                         "for int4, in prompts and decode, at int4's own accuracy (docs/quantization.md, \"int4 weights\")")
        if any(p.cache for p in self.partitions):
            lines.append(f"  compile cache: {self.cache_hits} hit(s), {self.cache_misses} miss(es)   "
                         f"process total: {dict(cache_stats())}")
        if self.partitions:
            w = self.weights
            pk = w["packed"]
            lines.append(f"  weights: {_mb(w['param_bytes'])} of parameters read in place, "
                         f"{_mb(w['folded_bytes'])} folded (engine-owned); process: {pk.get('entries', 0)} prepacked "
                         f"copies, {_mb(pk.get('bytes', 0))}, shared by {pk.get('holders', 0)} kernels "
                         f"({_mb(pk.get('shared_bytes', 0))} of copies saved)")
        if self.recompiles:
            lines.append(f"  recompiles: {len(self.recompiles)}")
        if self.reasons:
            lines.append("  fell back to PyTorch:")
            fb_ops = self.fallback_ops
            for op in sorted(self.reasons, key=lambda o: -fb_ops[o]):
                for r in self.reasons[op]:
                    lines.append(f"    {op} x{fb_ops[op]}: {r}")
        if self.engine_ops:
            lines.append("  in the engine: " + ", ".join(
                f"{op} x{n}" for op, n in sorted(self.engine_ops.items(), key=lambda kv: -kv[1])))
        return "\n".join(lines)

    __repr__ = __str__


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def weight_stats() -> dict:
    """The process's prepacked weights (src/kernels/onednn/packed_weights.h): 'entries' and 'bytes'
    (live copies, each once), 'holders' (kernels reading them), 'shared_bytes' (copies that sharing
    saved), 'packs' and 'hits' (over the process's life). Empty when the engine is not built."""
    try:
        from . import _C
    except ImportError:
        return {}
    return dict(_C.packed_weight_stats())


# Compile-cache events of this process (hit / miss / rebuilt), for reports and benchmarks.
_cache_counts: collections.Counter = collections.Counter()
_cache_lock = threading.Lock()


def count_cache_event(kind: str) -> None:
    with _cache_lock:
        _cache_counts[kind] += 1


def cache_stats() -> collections.Counter:
    """Compile-cache hits, misses and rebuilt entries of this process so far."""
    with _cache_lock:
        return collections.Counter(_cache_counts)


# The report the backend writes into: `explain` installs one for its run; otherwise each
# compiled Dynamo graph starts a new one. `last_report()` returns the latest.
_state = threading.local()
_last: list = [None]


def _collector() -> Optional[Report]:
    return getattr(_state, "collector", None)


def set_collector(report: Optional[Report]) -> None:
    _state.collector = report


def report_for_new_graph() -> Report:
    rep = _collector()
    if rep is None:
        rep = Report()
    _last[0] = rep
    return rep


def last_report() -> Optional[Report]:
    """The report of the most recent updraft compilation (None before the first)."""
    return _last[0]
