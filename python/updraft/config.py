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
_DUMP_DIR_ENV = "UPDRAFT_DUMP_DIR"
_WATCHDOG_ENV = "UPDRAFT_WATCHDOG_S"
# conv_layout -> the engine's channel_block option (-1: the layout this CPU's kernels prefer;
# "nhwc" is updraft._C.CHANNELS_LAST, src/kernels/channel_block.h, checked by a test).
_CONV_LAYOUTS = {"auto": -1, "nchw": 0, "nchw8c": 8, "nchw16c": 16, "nhwc": -2}
_CPU_ISAS = ("native", "avx2")  # the engine's CpuIsa names (src/kernels/kernel_options.h)
# The engine's WeightDType names (src/passes/options.h): how large linear weights are stored.
WEIGHT_DTYPES = ("f32", "bf16", "int8", "int4")
# int4's layout (src/ir/ops/params.h: kInt4Group, kInt4Block): a scale per group of 32 values of
# a row, two groups per 32 bytes; a weight whose rows do not fill whole blocks is stored int8,
# which the summary of quantize_weights and explain both say in these words.
INT4_GROUP = 32
INT4_BLOCK = 2 * INT4_GROUP
INT4_ROWS_RULE = f"int4 needs an input size that is a multiple of {INT4_BLOCK}"
# The engine's ActivationDType names (src/passes/options.h): what linears over int8 weights
# multiply x as.
ACTIVATION_DTYPES = ("f32", "int8")
_BOOL_TEXT = {"0": False, "1": True}
# Where training graphs run (CompilerConfig.training).
TRAINING_MODES = ("auto", "engine", "pytorch")
# Whether inference graphs are timed against eager PyTorch (CompilerConfig.inference).
INFERENCE_MODES = ("auto", "engine")

# The kernel knobs (the engine's KernelOptions, src/kernels/kernel_options.h): CompilerConfig
# field -> its environment variable. The environment is read here, and only here, for the
# defaults; the values are checked in CompilerConfig.__post_init__ whichever way they came.
KERNEL_KNOBS = {
    "prepack_weights": "UPDRAFT_PREPACK_WEIGHTS",
    "static_gemm": "UPDRAFT_STATIC_GEMM",
    "cpu_isa": "UPDRAFT_CPU_ISA",
    "min_work_per_thread": "UPDRAFT_MIN_WORK_PER_THREAD",
}


def _knob_from_env(field: str, default):
    """The default of kernel knob `field`: its environment variable parsed to the field's type
    (unset or empty: `default`). Text that does not parse raises, naming the variable."""
    var = KERNEL_KNOBS[field]
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    if isinstance(default, bool):
        if raw not in _BOOL_TEXT:
            raise ValueError(f"[updraft.config] {var}={raw!r} is not accepted for {field}; use 0 or 1")
        return _BOOL_TEXT[raw]
    if field == "min_work_per_thread":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"[updraft.config] {var}={raw!r} is not a number; {field} takes a number > 0 "
                             "(flops per thread)") from None
    return raw


def _knob(field: str, default):
    return dataclasses.field(default_factory=lambda: _knob_from_env(field, default))


def _debug_from_env() -> int:
    raw = os.environ.get(_DEBUG_ENV, "0").strip() or "0"
    try:
        level = int(raw)
    except ValueError:
        raise ValueError(f"[updraft.config] {_DEBUG_ENV}={raw!r} is not an integer; use 0, 1 or 2") from None
    if level not in (0, 1, 2):
        raise ValueError(f"[updraft.config] {_DEBUG_ENV}={level} is out of range; use 0, 1 or 2")
    return level


def _dump_dir_from_env() -> Optional[str]:
    return os.environ.get(_DUMP_DIR_ENV, "").strip() or None
def _watchdog_from_env() -> Optional[float]:
    raw = os.environ.get(_WATCHDOG_ENV, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"[updraft.config] {_WATCHDOG_ENV}={raw!r} is not a number; use seconds > 0, "
                         "or 0 for no watchdog") from None


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
    parameter_sets: module instances of one class (each its own parameters) one compiled graph
        keeps built. Dynamo runs every instance of a class through the same compiled code, so a
        server holding several models of one architecture calls one graph with several sets of
        frozen parameters: each set met for the first time is an engine compile (a recompile,
        counted against recompile_limit), and switching to a set already built costs a lookup.
        Beyond this many live sets the least recently used one is dropped (its next use
        compiles again). A kept set holds its engine state (prepacked weights included) and its
        parameters; a set whose parameters nobody else holds any more (the model was deleted)
        is released when the next new set arrives. 1: one set, rebuilt at every switch.
    plan_cache_size: plans each engine graph keeps, one per input-shape signature (least recently
        used out). A plan holds kernels, a memory plan and its arenas; a signature whose plan was
        evicted builds it again (counted in the report's plans built).
    range_plans: a graph with symbolic sizes builds one plan per size bucket (powers of two: 9-16,
        17-32, ...; memory planned for the bucket's top) and makes the plan of each size in it
        without a build, so a size that changes on every call (a KV cache growing by one token
        per decode step) builds a plan once per bucket, not once per size. A graph that does not
        qualify (a kernel built for one size, attributes bound per size, size inputs) builds one
        plan per signature, and `explain` says why. False: one plan per signature always.
    gears: updraft.Gear entries: sizes of a dynamic dim planned at compile time, with padding
        up to the next gear where the caller says it is safe (updraft/gears.py).
    conv_layout: activation layout between convolutions. "auto" (default): the layout this
        CPU's conv kernels run fastest in, kept through conv chains with reorders where a plain
        op reads it (src/passes/block_conv_layout.h): channels-last ("nhwc", oneDNN's brgemm
        convolutions) with AVX-512, channel-blocked "nchw8c" (its direct kernels) with AVX2;
        "nchw16c" is the AVX-512 direct kernels' layout; "nchw": plain NCHW everywhere (oneDNN's
        gemm-based convolution). Defaults to the
        environment variable UPDRAFT_CONV_LAYOUT, else "auto".
    dump_dir: a folder to write graph dumps into (updraft/debug/dump.py, docs/debugging.md): per
        graph Dynamo hands the backend, a folder `NNN_<name>/` with the Dynamo and aten graphs,
        the partitioning and why, each engine partition's IR after every pass (text IR that
        updraft.debug.load_ir reads back), its memory plan per input shape and Graphviz pictures;
        README.txt in it says what each file is. None or "": no dumps. Defaults to the
        environment variable UPDRAFT_DUMP_DIR. A dump that cannot be written is one warning, never
        a failed compile.
    training: where the graphs of a training step run (AOTAutograd's forward and backward
        graphs, made when an input needs grad and autograd is on; docs/training.md). "engine":
        partitioned into the engine like inference graphs, with parameters as inputs (never
        frozen: the optimizer updates them in place), PyTorch for the rest. "auto" (default):
        the compiled step and eager PyTorch alternate over the first steps (one untimed step
        each, then 3 timed each, forward plus backward) and the faster runs every later step;
        the report gives both times. "pytorch": AOTAutograd's graphs run in PyTorch.
    inference: whether an inference graph is checked against eager PyTorch. "auto" (default):
        over its first calls the compiled graph and Dynamo's graph run eagerly alternate (one
        untimed call each, then 3 timed each); PyTorch keeps the graph only when each of its
        timed calls beat each of the compiled graph's (so load on a shared machine during the
        trials does not decide it), and explain says so with both times. It is the rule "never
        slower than eager" for whatever the engine's own choices miss. "engine": no timing, the
        compiled graph always runs (benchmarks of the engine itself, tests). A graph compiled
        with weight_dtype other than "f32", or over the model's own int8/bf16 weights, is never
        timed: eager computes with other numbers, or much slower.
    keep_arenas: whether an engine graph keeps the memory of its intermediates (its plan's
        arena) between calls. None (default): inference graphs keep it (no allocation or page
        faults per call), training graphs free it when each call returns (the forward's arena
        would otherwise stay resident through the backward; BERT-base training: peak RSS 3264
        -> 2842 MB, eager 2478; docs/training.md). True or False forces it for every graph.
        Changes no result; not in the compile-cache key.
    release_saved: whether a training backward frees each saved activation as soon as its last
        engine step has read it (True, default), as eager autograd frees each after its node,
        instead of holding every one until the backward returns (ViT-B/16 batch 4: the peak RSS
        measured in docs/training.md). The cost: a backward call whose engine run fails after
        freeing an input cannot be re-run in PyTorch, so that call raises (naming the error),
        and the graph runs in PyTorch from the next call on. False keeps every input for a
        re-run. Changes no result; not in the compile-cache key.
    recompute_pointwise: whether a training step's partition (AOTAutograd's min-cut
        partitioner) may recompute a cheap pointwise value in the backward where a matmul or
        convolution there reads it, instead of saving it from the forward (True, default;
        torch's `ban_recompute_materialized_backward` turned off for that partition only, for
        graphs headed for the engine). A transformer MLP then saves its first linear's output
        alone and the backward recomputes the activation from it, where eager and Inductor keep
        both: ViT-B/16 batch 4 saved 363 MB of activations instead of 474 (the two rules below
        off; 280 MB with them), and at one thread ViT-B/16 and BERT-base b4 peaked 23-94 MB
        lower with their steps level (the backward's extra pass against the forward's output it
        no longer writes; docs/training.md, "What the forward saves"). False: torch's rule.
        Gradients stay within the training tolerances either way (tests/python/test_training.py).
    recompute_norms: whether that partition may also recompute a layer norm in the backward
        (output, mean and rstd from the saved input, weight and bias), which torch's allowlist
        leaves out, instead of saving its output beside its input: a transformer layer then
        keeps the residual stream alone where it kept both (True, default; graphs headed for
        the engine only). The backward pays one layer norm per layer again (two passes over a
        [tokens, hidden] tensor). False: layer norms are saved as torch's rule saves them.
        Measured in docs/training.md, "What the forward saves".
    recompute_views: whether that partition recomputes a view in the backward instead of saving
        it beside the value it views (True, default; torch's `recompute_views` for that
        partition only, graphs headed for the engine). Eager autograd keeps such a pair as one
        storage; the engine writes every forward output to its own tensor, so a saved view is a
        second copy: attention's result, kept for its own backward and, reshaped, for the output
        projection's weight gradient. False: torch's rule.
    keep_freed_memory: whether the process's malloc keeps the memory torch frees for reuse
        (glibc's mmap threshold fixed at 32 MB and trimming off: updraft/host_memory.py), so a
        training step does not fault the memory it freed last step in again, 4 KB at a time
        (GPT-2 small's step on a 2-core VM: 12,000-56,000 faults -> ~900, 600-740 -> ~535 ms;
        peak RSS level there, 2-5% higher on BERT-base; docs/training.md). None (default): set
        when the first training graph is compiled; True: when any graph is; False: never by this
        config. The setting is the process's and is not undone; it is left alone where the user
        set malloc variables or preloaded another allocator. The report says what the process's
        malloc does. Changes no result; not in the compile-cache key.
    weight_dtype: how the engine stores the weights of large linear layers (constant f32 weights
        of at least 64K elements, src/passes/quantize_weights.h; docs/quantization.md). "f32"
        (default): as given. "bf16": rounded to bf16 (half the bytes). "int8": symmetric int8 with
        one f32 scale per output channel (a quarter of the bytes). "int4": symmetric int4, two per
        byte, with one bf16 scale per group of 32 values of a row (0.141 of the bytes; a weight
        whose input size is not a multiple of 64 is stored int8). All are widened to f32 in
        registers and accumulate in f32; activations stay f32. Decode (a few rows per call)
        reads fewer bytes and runs faster; results differ from f32 by the rounding of the
        weights (measured error in docs/quantization.md). Such graphs run in the engine at
        every call, whatever `inference` says (docs/quantization.md). In the compile-cache key.
    activation_dtype: what the linears over int8 weights (weight_dtype="int8", or the model's own
        int8 layers: updraft.quantize_weights) multiply. "f32" (default): x as given, the weight
        widened to f32. "int8": each row of x is quantised to int8 at every call (symmetric, one
        scale per row, as llama.cpp's q8_0 quantises its activations) and multiplied by the int8
        weight with exact int32 sums (AVX-512 VNNI where the CPU has it): several times the
        multiply-adds per instruction, so a prompt (many rows) runs much faster; results move
        further from f32 (measured in docs/quantization.md, "int8 activations"). Other ops, and
        linears over f32 or bf16 weights, are unchanged (with f32 weights the option changes
        nothing). A graph with int8 weights is never timed against eager. In the compile-cache
        key.
    Kernel knobs (the engine's KernelOptions; each defaults to its environment variable, then
    to the value shown):
    prepack_weights (UPDRAFT_PREPACK_WEIGHTS=0/1, True): linear/matmul kernels on oneDNN keep a
        prepacked copy of constant weights, one per weight and layout in the process, shared by
        every compiled graph (prefill and decode; src/kernels/onednn/packed_weights.h); False
        reads them in place (less memory, some speed: docs/BENCHMARKS.md, "Issue 20: one copy
        of the weights"). An f32 linear with a large [N, K] weight reads it in place at up to 64
        static rows or any symbolic count whatever this says (src/kernels/cpu/linear_stream.h:
        level with oneDNN's packed copy there); what this packs is such linears over more rows
        (BERT, ViT), convolutions, small weights and matmuls by a [K, N] weight (GPT-2's Conv1D)
        at more than 4 rows. A prepacked plain layout whose rows would start a
        multiple of 1 KiB apart is padded by a cache line per row (up to 2x faster small-M
        gemms; it also copies a [K, N] weight that would otherwise be read in place). The
        parameters themselves are never released (docs/decisions.md says why).
    static_gemm (UPDRAFT_STATIC_GEMM=0/1, False): True turns off the runtime-M linear for a
        symbolic batch (static kernels per shape, each plan building its own), for comparing
        the two. The runtime-M kernel itself runs a static primitive per M it meets over one
        weight layout (src/kernels/onednn/matmul.cpp).
    cpu_isa (UPDRAFT_CPU_ISA, "native"): "avx2" keeps the engine's own kernels (sdpa tiles, f64
        gemm) off AVX-512 on a CPU that has it, for comparison; oneDNN is not affected.
    min_work_per_thread (UPDRAFT_MIN_WORK_PER_THREAD, None: the engine's 2097152): flops (or
        element operations) a kernel needs per thread before it uses a second one.
    None of them changes an optimised graph, so none is in the compile-cache key: kernels are
    chosen when a plan is built, under the config in force then, on a cache hit too.
    watchdog_s: seconds one engine call may run (each partition call on its own, not the whole
        compiled call). Past it the engine prints every in-flight engine call (thread, partition,
        current step with op, kernel and shapes, time so far) and its plan to stderr, and stops
        the call at its next step boundary with updraft._C.WatchdogTimeout, which reaches the
        caller (it is never turned into a PyTorch fallback). A step that never returns is
        reported but cannot be interrupted (src/runtime/watchdog.h). None or 0: off (default);
        defaults to the environment variable UPDRAFT_WATCHDOG_S. Not in the compile-cache key.
    Bisect switches (updraft.debug.bisect sets them; a user may too, to work around a bug):
    disable_passes: engine pipeline passes to skip, by name (updraft._C.pass_names(); "verify"
        is mandatory and refused). Skipped passes show in the pass log and in `explain`. In
        the compile-cache key.
    eager_nodes: aten graph node names (FX `node.name`, e.g. "addmm_1") left to PyTorch, with the
        reason "eager_nodes (bisect)" in `explain`. Names that no graph has are ignored.
    debug_fault: TEST-ONLY, for testing the bisect tool: a deliberate wrong result. "" (default)
        off; "pass:NAME": the first time pass NAME changes an engine graph it corrupts its own
        result (in the compile-cache key); "kernel:OP": every kernel of engine op OP adds 1 to
        element 0 of its output (chosen at plan build, like the kernel knobs). Never set it in
        production.
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
    parameter_sets: int = 4
    plan_cache_size: int = 16
    range_plans: bool = True
    gears: tuple = ()
    conv_layout: str = dataclasses.field(default_factory=lambda: os.environ.get(_CONV_LAYOUT_ENV, "auto"))
    weight_dtype: str = "f32"
    activation_dtype: str = "f32"
    training: str = "auto"
    inference: str = "auto"
    keep_arenas: Optional[bool] = None
    release_saved: bool = True
    recompute_pointwise: bool = True
    recompute_norms: bool = True
    recompute_views: bool = True
    keep_freed_memory: Optional[bool] = None
    prepack_weights: bool = _knob("prepack_weights", True)
    static_gemm: bool = _knob("static_gemm", False)
    cpu_isa: str = _knob("cpu_isa", "native")
    min_work_per_thread: Optional[float] = _knob("min_work_per_thread", None)
    disable_passes: tuple = ()
    eager_nodes: tuple = ()
    debug_fault: str = ""
    dump_dir: Optional[str] = dataclasses.field(default_factory=_dump_dir_from_env)
    watchdog_s: Optional[float] = dataclasses.field(default_factory=_watchdog_from_env)

    def __post_init__(self) -> None:
        for name in ("freeze", "fold_constants", "fuse", "fallback", "partition_cost", "prepack_weights",
                     "static_gemm", "range_plans", "release_saved", "recompute_pointwise",
                     "recompute_norms", "recompute_views"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"[updraft.config] {name} must be a bool, got {type(value).__name__} {value!r}")
        for name, low in (("num_threads", 0), ("min_partition_size", 1), ("debug", 0),
                          ("cache_max_bytes", 0), ("recompile_limit", 0), ("parameter_sets", 1),
                          ("plan_cache_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"[updraft.config] {name} must be an int, got {type(value).__name__} {value!r}")
            if value < low:
                raise ValueError(f"[updraft.config] {name}={value} must be >= {low}")
        if self.conv_layout not in _CONV_LAYOUTS:
            raise ValueError(f"[updraft.config] conv_layout={self.conv_layout!r} is not one of "
                             f"{sorted(_CONV_LAYOUTS)} (also checked when it comes from {_CONV_LAYOUT_ENV})")
        if not isinstance(self.weight_dtype, str) or self.weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"[updraft.config] weight_dtype={self.weight_dtype!r} is not one of {list(WEIGHT_DTYPES)}; "
                             "use \"bf16\", \"int8\" or \"int4\" for low-precision linear weights, \"f32\" to keep them")
        if not isinstance(self.activation_dtype, str) or self.activation_dtype not in ACTIVATION_DTYPES:
            raise ValueError(f"[updraft.config] activation_dtype={self.activation_dtype!r} is not one of "
                             f"{list(ACTIVATION_DTYPES)}; \"int8\" quantises the rows of x of linears over int8 "
                             "weights, \"f32\" keeps them")
        for name in ("keep_arenas", "keep_freed_memory"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"[updraft.config] {name} must be True, False or None, got "
                                f"{type(value).__name__} {value!r}")
        if self.training not in TRAINING_MODES:
            raise ValueError(f"[updraft.config] training={self.training!r} is not one of {list(TRAINING_MODES)}; "
                             "\"engine\" runs training graphs in the engine, \"pytorch\" leaves them to PyTorch, "
                             "\"auto\" times both and keeps the faster")
        if self.inference not in INFERENCE_MODES:
            raise ValueError(f"[updraft.config] inference={self.inference!r} is not one of {list(INFERENCE_MODES)}; "
                             "\"auto\" times each inference graph against eager PyTorch over its first calls and "
                             "leaves it to PyTorch when that is clearly faster, \"engine\" always runs the compiled graph")
        if self.cpu_isa not in _CPU_ISAS:
            raise ValueError(f"[updraft.config] cpu_isa={self.cpu_isa!r} is not one of {list(_CPU_ISAS)} "
                             f"(also checked when it comes from {KERNEL_KNOBS['cpu_isa']})")
        work = self.min_work_per_thread
        if work is not None:
            if isinstance(work, bool) or not isinstance(work, (int, float)):
                raise TypeError(f"[updraft.config] min_work_per_thread must be a number or None, got "
                                f"{type(work).__name__} {work!r}")
            if not (0 < work < float("inf")):
                raise ValueError(f"[updraft.config] min_work_per_thread={work!r} must be a finite number > 0 "
                                 f"(also checked when it comes from {KERNEL_KNOBS['min_work_per_thread']})")
        limit = self.watchdog_s
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise TypeError(f"[updraft.config] watchdog_s must be a number of seconds or None, got "
                                f"{type(limit).__name__} {limit!r}")
            if not (0 <= limit < float("inf")):
                raise ValueError(f"[updraft.config] watchdog_s={limit!r} must be a finite number of seconds >= 0 "
                                 f"(0: off; also checked when it comes from {_WATCHDOG_ENV})")
        if self.debug > 2:
            raise ValueError(f"[updraft.config] debug={self.debug} is out of range; use 0, 1 or 2")
        if self.cache_dir is not None:
            if isinstance(self.cache_dir, os.PathLike):
                object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
            if not isinstance(self.cache_dir, str):
                raise TypeError(f"[updraft.config] cache_dir must be a path or None, got "
                                f"{type(self.cache_dir).__name__} {self.cache_dir!r}")
        if self.dump_dir is not None:
            if isinstance(self.dump_dir, os.PathLike):
                object.__setattr__(self, "dump_dir", os.fspath(self.dump_dir))
            if not isinstance(self.dump_dir, str):
                raise TypeError(f"[updraft.config] dump_dir must be a path, \"\" or None, got "
                                f"{type(self.dump_dir).__name__} {self.dump_dir!r}")
            if not self.dump_dir:
                object.__setattr__(self, "dump_dir", None)  # "" is off, as None
            elif os.path.exists(self.dump_dir) and not os.path.isdir(self.dump_dir):
                raise ValueError(f"[updraft.config] dump_dir={self.dump_dir!r} exists and is not a folder "
                                 f"(also checked when it comes from {_DUMP_DIR_ENV}); give a folder path")
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
        self._check_bisect_switches()

    def _check_bisect_switches(self) -> None:
        for name in ("disable_passes", "eager_nodes"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"[updraft.config] {name} must be a sequence of names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not isinstance(self.debug_fault, str):
            raise TypeError(f"[updraft.config] debug_fault must be a str, got {self.debug_fault!r}")
        if not self.disable_passes and not self.debug_fault:
            return
        from . import _C  # the pipeline's own list: the names are not retyped here

        passes = list(_C.pass_names())
        for p in self.disable_passes:
            if p not in passes:
                raise ValueError(f"[updraft.config] disable_passes names unknown pass {p!r}; the passes are {passes}")
            if _C.pass_is_mandatory(p):
                raise ValueError(f"[updraft.config] disable_passes: pass {p!r} is mandatory (it checks the graph, "
                                 "it does not rewrite it) and cannot be disabled; remove it")
        if self.debug_fault:
            kind, _, target = self.debug_fault.partition(":")
            if kind == "pass":
                if target not in passes or _C.pass_is_mandatory(target):
                    raise ValueError(f"[updraft.config] debug_fault={self.debug_fault!r}: {target!r} is not a pass "
                                     f"that rewrites the graph; use one of "
                                     f"{[p for p in passes if not _C.pass_is_mandatory(p)]}")
            elif kind == "kernel":
                if target not in _C.op_names():
                    raise ValueError(f"[updraft.config] debug_fault={self.debug_fault!r}: {target!r} is not an engine "
                                     "op; `updraft ops` lists them")
            else:
                raise ValueError(f"[updraft.config] debug_fault={self.debug_fault!r}: use 'pass:NAME' or 'kernel:OP' "
                                 "(test-only), or '' for off")

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
        opts = {"fold_constants": self.fold_constants, "fuse": self.fuse, "conv_layout": self.conv_layout}
        # Only when set, so that the keys of entries stored without them stay the same.
        if self.disable_passes:
            opts["disable_passes"] = sorted(set(self.disable_passes))
        if self.debug_fault.startswith("pass:"):
            opts["debug_fault"] = self.debug_fault
        if self.weight_dtype != "f32":
            opts["weight_dtype"] = self.weight_dtype
        if self.activation_dtype != "f32":
            opts["activation_dtype"] = self.activation_dtype
        return opts

    def engine_options(self) -> dict:
        """The options dict that updraft._C.compile accepts."""
        opts = {"fold_constants": self.fold_constants, "fuse": self.fuse,
                "num_threads": self.num_threads, "debug": self.debug,
                "channel_block": _CONV_LAYOUTS[self.conv_layout], "weight_dtype": self.weight_dtype,
                "activation_dtype": self.activation_dtype,
                "prepack_weights": self.prepack_weights, "static_gemm": self.static_gemm,
                "cpu_isa": self.cpu_isa, "plan_cache_size": self.plan_cache_size,
                "range_plans": self.range_plans}
        if self.min_work_per_thread is not None:
            opts["min_work_per_thread"] = float(self.min_work_per_thread)
        if self.disable_passes:
            opts["disable_passes"] = list(self.disable_passes)
        kind, _, target = self.debug_fault.partition(":")
        if kind == "pass":
            opts["fault_pass"] = target
        elif kind == "kernel":
            opts["fault_op"] = target
        if self.dump_dir:
            opts["record_ir"] = True  # the pass log keeps each pass's IR, parseable, for the dump
        if self.watchdog_s:
            opts["watchdog_s"] = float(self.watchdog_s)
        if self.keep_arenas is not None:
            opts["keep_arenas"] = self.keep_arenas
        return opts
