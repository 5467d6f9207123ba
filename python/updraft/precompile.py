"""torch's precompile with the updraft backend: compile once, save, load in a fresh process.

    with torch.no_grad():
        fn = torch.compile(model.forward, backend="updraft", fullgraph=True,
                           options={"guard_filter_fn": input_guards}).aot_compile(((x,), {}))
    fn.save_compiled_function("model.pt2")
    ...                                                  # another process, same model class
    with open("model.pt2", "rb") as f:
        fn = torch.compiler.load_compiled_function(f)
    out = fn(model, x)                                   # no Dynamo trace, no AOTAutograd, no passes

torch 2.13's aot_compile_fullgraph runs the backend with torch._functorch.config
force_autograd_cache and bypass_autograd_cache_key set (torch's own eager backend reads the first)
and asks it for a SerializableCallable: a callable with serialize_compile_artifacts /
deserialize_compile_artifacts. `requested()` tells the backend it is in that call;
`capture` then runs the usual path (AOTAutograd inference graph, partitioning, engine
compiles), calls the result once on the example inputs so every engine partition is built, and
returns a `PrecompiledGraph`.

The saved artifact (`_pack` / `_unpack`, the "UPDRAFTP" container below) holds, per engine
partition, its optimised engine graph as a compile-cache entry (src/cache/entry.h): torch passes
the parameters as inputs on every call of a precompiled function (the module is an argument),
so the entry refers to them by position, carries the recipes of the constants the passes folded
from them (replayed at the first call: a new checkpoint gives the right answer) and every other
constant by value. Beside the entries: the Python code of the outer graph (what runs in
PyTorch, and the calls to the partitions) and of each partition (its PyTorch fallback), the
names those codes use, the graph's tensor attributes by value, and the compile options. Loading
execs that code and checks the entries' containers (checksums); the first call binds the parameters, replays the
folds and builds the plans. Nothing of Dynamo's tracing, AOTAutograd or the engine's passes runs.

It does not support (refused with an error saying so, at aot_compile time): training graphs
(aot_compile outside torch.no_grad() with parameters that require grad), graphs whose
AOTAutograd wrapper does more than call the graph (input mutation, outputs aliasing inputs,
effect tokens, duplicated inputs), gears, and code that names objects a fresh process cannot
import. Graph breaks are refused by torch itself (aot_compile needs fullgraph=True).

Trust: torch's artifact is a pickle, so loading one runs code; ours adds Python source that
load execs. Load artifacts only from where you would import code from (docs/precompile.md).
"""
from __future__ import annotations

import collections
import dataclasses
import importlib
import io
import json
import struct
import time
import types
import zlib
from typing import Any, Optional

import torch
from torch._dynamo.aot_compile_types import SerializableCallable

from .config import CompilerConfig
from .engine_partition import EnginePartition, _Built
from .report import PartitionReport, report_for_new_graph

MAGIC = b"UPDRAFTP"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIQ")  # magic, format version, crc32 of the metadata, metadata length
# Folded constants are not stored in a precompiled entry: replaying their recipes at the first
# call costs less than reading and fingerprinting them (docs/decisions.md, "Precompile").
_MAX_FOLDED_BYTES = 0
# Fields of CompilerConfig that name this machine's folders: a loaded graph uses neither (the
# artifact is its own cache; dumps are of compiles, and a load compiles nothing).
_LOCAL_FIELDS = {"cache_dir": "", "dump_dir": None}


class PrecompileError(RuntimeError):
    """An aot_compile the updraft backend cannot save, or an artifact it cannot load."""


def requested() -> bool:
    """True while torch's aot_compile_fullgraph calls the backend (it sets both flags around
    that call only; torch's eager backend reads force_autograd_cache the same way)."""
    cfg = torch._functorch.config
    return bool(cfg.force_autograd_cache and cfg.bypass_autograd_cache_key)


def _c():
    from . import _C
    return _C


# ----------------------------------------------------------------------------- capture

def capture(gm: torch.fx.GraphModule, example_inputs: list, config: CompilerConfig) -> "PrecompiledGraph":
    """The backend's answer inside aot_compile: the usual inference compile, built at once on
    the example inputs, as a SerializableCallable. Raises PrecompileError for what cannot be
    saved (module docstring)."""
    from torch._dynamo.backends.common import aot_autograd

    from .backend import PartitionedGraph, _make_compilers, decompositions

    if config.gears:
        raise PrecompileError("[updraft.precompile] CompilerConfig.gears cannot be precompiled (gears plan "
                              "at the first call from the graph); compile without gears")
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    compilers = _make_compilers(config, names)
    seen: dict = {}
    inference = compilers["inference_compiler"]

    def capture_inference(aot_gm: torch.fx.GraphModule, aot_inputs: list) -> Any:
        from torch._guards import TracingContext

        tc = TracingContext.try_get()
        seen["meta"] = getattr(tc, "fw_metadata", None) if tc is not None else None
        seen["inputs"] = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
        seen["compiled"] = compiled = inference(aot_gm, aot_inputs)
        return compiled

    def refuse_training(kind: str) -> Any:
        def compiler(aot_gm: torch.fx.GraphModule, aot_inputs: list) -> Any:
            raise PrecompileError(
                f"[updraft.precompile] AOTAutograd made a {kind} graph (grad mode is on and an input or "
                "parameter requires grad); updraft precompiles inference graphs only: call aot_compile "
                "under torch.no_grad()")
        return compiler

    compilers.update(inference_compiler=capture_inference, fw_compiler=refuse_training("training forward"),
                     bw_compiler=refuse_training("training backward"))
    # AOTAutograd's own cache would try to bundle the result (it is not Inductor's OutputCode):
    # the entries below are updraft's bundle, so its cache stays as in a plain torch.compile.
    with torch._functorch.config.patch(force_autograd_cache=False, bundled_autograd_cache=False,
                                       strict_autograd_cache=False):
        aot_autograd(decompositions=decompositions(), **compilers)(gm, example_inputs)
    if "compiled" not in seen:
        raise PrecompileError("[updraft.precompile] AOTAutograd produced no inference graph; "
                              "call aot_compile under torch.no_grad()")
    _check_plain_wrapper(seen["meta"], seen["inputs"], len(names))
    compiled = seen["compiled"]
    if isinstance(compiled, PartitionedGraph):
        graph = compiled
        outer, parts, frozen, checked = compiled.gm, compiled.parts, compiled.frozen, compiled.checked
        names = compiled._names
    else:  # the whole graph runs in PyTorch (no partition, or its compile failed with fallback)
        fn = getattr(compiled, "__wrapped__", None)
        outer = getattr(fn, "__self__", None)
        if not isinstance(outer, torch.fx.GraphModule):
            raise PrecompileError(f"[updraft.precompile] the backend returned {type(compiled).__name__}, "
                                  "which has no graph to save; this is a bug in updraft")
        graph, parts, frozen, checked = compiled, [], [], []
    pg = PrecompiledGraph(graph, _Recipe(outer, parts, frozen, names, config, getattr(compiled, "report", None),
                                         checked))
    with torch.no_grad():  # builds every partition now: the entries are saved from the builds
        pg.graph(list(example_inputs))
    return pg


def _check_plain_wrapper(meta: Any, aot_inputs: int, dynamo_inputs: int) -> None:
    """The loaded graph is called with Dynamo's flat inputs and returns the graph's outputs as
    they are; AOTAutograd's runtime wrapper, which is not saved, must have nothing else to do."""
    if meta is None:
        raise PrecompileError("[updraft.precompile] AOTAutograd gave no metadata for the graph; "
                              "this torch version is not supported for precompile")
    problems = []
    mutated = [i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata]
    if mutated:
        problems.append(f"it mutates input(s) {mutated[:5]}")
    bad_out = [i for i, o in enumerate(meta.output_info)
               if o.output_type.name in ("alias_of_input", "is_input")]
    if bad_out:
        problems.append(f"output(s) {bad_out[:5]} alias an input")
    if meta.num_intermediate_bases:
        problems.append(f"{meta.num_intermediate_bases} output(s) alias an intermediate base")
    if meta.tokens:
        problems.append("it has side effects (effect tokens)")
    if any(type(m).__name__ == "SubclassCreationMeta" for m in getattr(meta, "subclass_inp_meta", None) or []):
        problems.append("an input is a tensor subclass")
    if aot_inputs != dynamo_inputs:
        problems.append(f"AOTAutograd's graph takes {aot_inputs} inputs for Dynamo's {dynamo_inputs} "
                        "(a tensor passed twice, e.g. tied weights, is deduplicated)")
    if problems:
        raise PrecompileError("[updraft.precompile] this graph cannot be precompiled: " + "; ".join(problems) +
                              ". Run it with torch.compile(backend='updraft') instead (it handles these at run time)")


@dataclasses.dataclass
class _Recipe:
    """What a save needs from a captured graph."""
    outer: torch.fx.GraphModule
    parts: list
    frozen: list
    names: list
    config: CompilerConfig
    report: Any = None  # the graph's GraphReport: what runs in PyTorch and why
    checked: list = dataclasses.field(default_factory=list)  # PartitionedGraph.checked


# ----------------------------------------------------------------------------- the callable

class PrecompiledGraph(SerializableCallable):
    """The compiled graph torch's precompiled function calls: the outer graph with its engine
    partitions (backend.PartitionedGraph), or the whole graph in PyTorch. Called with Dynamo's
    flat inputs (parameters included), returns the graph's outputs."""

    def __init__(self, graph: Any, recipe: Optional[_Recipe] = None, data: Optional[bytes] = None) -> None:
        self.graph = graph  # boxed: takes the list of inputs
        self._recipe = recipe  # set when captured in this process
        self._data = data  # set when loaded: saving again writes these bytes back

    def __call__(self, *args: Any) -> Any:
        # An inference graph: run as AOTAutograd's inference wrapper runs it, without autograd.
        if torch.is_grad_enabled():
            with torch.no_grad():
                return self.graph(list(args))
        return self.graph(list(args))

    @classmethod
    def serialize_compile_artifacts(cls, fn: "PrecompiledGraph") -> bytes:
        if fn._data is not None:
            return fn._data
        return _save(fn._recipe)

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "PrecompiledGraph":
        return _load(data)


# ----------------------------------------------------------------------------- save

def _save(recipe: _Recipe) -> bytes:
    C = _c()
    blobs: list[bytes] = []

    def blob(b: bytes) -> int:
        blobs.append(b)
        return len(blobs) - 1

    parts = []
    for i, p in enumerate(recipe.parts):
        st = p._state
        if st is None:
            raise PrecompileError(f"[updraft.precompile] {p.report.name} is not built (its parameters changed "
                                  "since the last call); call the compiled function once, then save")
        spec = {"target": _target_of(recipe.outer, p), "name": p.report.name, "const_kinds": p.const_kinds,
                "multi": p._multi, "fallback": _code_spec(p.sub, f"{p.report.name} (its PyTorch fallback)", blob),
                "ops": [list(o) for o in p.report.ops]}
        if isinstance(st, str):
            spec["failed"] = st  # runs in PyTorch, as it did here
        else:
            key = _entry_key(i, p.report.name)
            spec.update(entry=blob(C.save_entry(st.cg, key, f"precompiled {p.report.name}",
                                                max_folded_bytes=_MAX_FOLDED_BYTES)),
                        key=key, runtime_pos=st.runtime_pos, size_pos=st.size_pos,
                        orders=[None if o is None else list(o) for o in st.orders],
                        out_dtypes=[str(d).removeprefix("torch.") for d in st.out_dtypes])
        parts.append(spec)
    meta = {
        "engine": C.engine_version(), "cpu": C.cpu_features(), "torch": torch.__version__,
        "config": _config_fields(recipe.config),
        "outer": _code_spec(recipe.outer, "the outer graph", blob),
        "frozen": recipe.frozen, "checked": recipe.checked, "names": recipe.names, "partitions": parts,
        "report": _report_fields(recipe.report),
        "blobs": [len(b) for b in blobs],
    }
    return _pack(meta, blobs)


# What a loaded graph's report restores (the partitions' own ops are restored with them).
_REPORT_FIELDS = ("fallback_ops", "fallback_compute", "reasons", "shape_ops", "free_views", "cost_notes")


def _report_fields(report: Any) -> dict:
    if report is None:
        return {}
    out = {f: getattr(report, f) for f in _REPORT_FIELDS}
    out["fallback_ops"] = dict(out["fallback_ops"])
    return out


def _entry_key(i: int, name: str) -> str:
    return f"updraft precompile {FORMAT_VERSION} partition {i} {name}"


def _target_of(outer: torch.fx.GraphModule, part: EnginePartition) -> str:
    for name, mod in outer.named_children():
        if mod is part:
            return name
    raise PrecompileError(f"[updraft.precompile] {part.report.name} is not a submodule of its graph; this is a bug")


def _config_fields(config: CompilerConfig) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        if f.name in _LOCAL_FIELDS or f.name == "gears":
            continue
        v = getattr(config, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def _code_spec(gm: torch.fx.GraphModule, what: str, blob: Any) -> dict:
    """A GraphModule as source, the globals that source names (as import paths), and its tensor
    attributes (by value, one torch.save blob)."""
    code = gm.graph.python_code(root_module="self")
    glob = {name: _global_spec(name, obj, what) for name, obj in code.globals.items()}
    attrs = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            t = n.target
            if not t.isidentifier():
                raise PrecompileError(f"[updraft.precompile] {what} reads attribute {t!r}, a nested path; "
                                      "not supported by precompile")
            v = getattr(gm, t)
            if not isinstance(v, torch.Tensor):
                raise PrecompileError(f"[updraft.precompile] {what} reads attribute {t!r}, a "
                                      f"{type(v).__name__}; only tensor attributes can be saved")
            attrs[t] = v.detach()
        elif n.op == "call_module" and not str(n.target).isidentifier():
            raise PrecompileError(f"[updraft.precompile] {what} calls submodule {n.target!r}, a nested path; "
                                  "not supported by precompile")
    spec = {"src": code.src, "globals": glob}
    if attrs:
        buf = io.BytesIO()
        torch.save(attrs, buf)
        data = buf.getvalue()
        spec["attrs"] = blob(data)
        spec["attrs_crc"] = zlib.crc32(data)
    return spec


def _global_spec(name: str, obj: Any, what: str) -> list:
    if isinstance(obj, types.ModuleType):
        return ["module", obj.__name__]
    if obj is None or isinstance(obj, (bool, int, str)):
        return ["value", obj]
    if isinstance(obj, float):
        return ["float", repr(obj)]  # inf, nan: JSON has no literal for them
    if obj is type(None):
        return ["nonetype"]
    if isinstance(obj, torch.device):
        return ["device", str(obj)]
    if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
        return ["torch", str(obj).removeprefix("torch.")]
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(mod, str) and isinstance(qual, str) and "<" not in qual:
        try:
            if _resolve(mod, qual) is obj:
                return ["import", mod, qual]
        except Exception:
            pass
    raise PrecompileError(f"[updraft.precompile] {what} uses {name} = {obj!r}, which a fresh process could not "
                          "import by name; precompile supports graphs whose code uses importable functions only")


def _resolve(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _pack(meta: dict, blobs: list) -> bytes:
    text = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode()
    return b"".join([_HEADER.pack(MAGIC, FORMAT_VERSION, zlib.crc32(text), len(text)), text, *blobs])


# ----------------------------------------------------------------------------- load

def _corrupt(why: str) -> PrecompileError:
    return PrecompileError(f"[updraft.precompile] the saved artifact is not usable: {why}; compile it again "
                           "(aot_compile, then save_compiled_function)")


def _unpack(data: bytes) -> tuple[dict, list]:
    if not isinstance(data, (bytes, bytearray)):
        raise _corrupt(f"its updraft part is a {type(data).__name__}, not bytes")
    if len(data) < _HEADER.size:
        raise _corrupt(f"its updraft part is {len(data)} bytes, shorter than its header (truncated)")
    magic, version, crc, n = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise _corrupt("its updraft part does not start with the UPDRAFTP magic")
    if version != FORMAT_VERSION:
        raise PrecompileError(f"[updraft.precompile] the artifact's updraft part has format version {version}; "
                              f"this updraft reads version {FORMAT_VERSION}. Compile and save it again with this "
                              "updraft")
    end = _HEADER.size + n
    if end > len(data):
        raise _corrupt("its metadata runs past the end (truncated)")
    text = bytes(data[_HEADER.size:end])
    if zlib.crc32(text) != crc:
        raise _corrupt("its metadata checksum does not match (corrupted)")
    try:
        meta = json.loads(text)
        sizes = [int(s) for s in meta["blobs"]]
    except Exception as e:
        raise _corrupt(f"its metadata does not parse ({type(e).__name__}: {e})") from None
    if any(s < 0 for s in sizes) or end + sum(sizes) != len(data):
        raise _corrupt(f"its blobs total {sum(sizes)} bytes but {len(data) - end} follow the metadata (truncated?)")
    view, blobs, at = memoryview(data), [], end
    for s in sizes:
        blobs.append(view[at:at + s])
        at += s
    return meta, blobs


def _load(data: bytes) -> PrecompiledGraph:
    from .backend import PartitionedGraph, _boxed

    C = _c()
    meta, blobs = _unpack(data)
    try:
        return _build_loaded(meta, blobs, data, C, PartitionedGraph, _boxed)
    except PrecompileError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise _corrupt(f"its metadata is inconsistent ({type(e).__name__}: {e})") from None


def _build_loaded(meta: dict, blobs: list, data: bytes, C: Any, PartitionedGraph: Any, _boxed: Any) -> PrecompiledGraph:
    if meta["engine"] != C.engine_version():
        raise PrecompileError(f"[updraft.precompile] the artifact was compiled by engine {meta['engine']}; this is "
                              f"{C.engine_version()}. Compile and save it again with this updraft")
    missing = sorted(set(meta["cpu"].split()) - set(C.cpu_features().split()))
    if missing:
        raise PrecompileError(f"[updraft.precompile] the artifact was compiled on a CPU with {' '.join(missing)}, "
                              "which this CPU lacks; compile and save it again on this machine")
    fields = dict(meta["config"])
    for k, v in fields.items():
        if isinstance(v, list):
            fields[k] = tuple(v)
    config = CompilerConfig(**fields, **_LOCAL_FIELDS)
    report = report_for_new_graph().new_graph("inference (precompiled)")
    for k, v in meta.get("report", {}).items():
        if k in _REPORT_FIELDS:
            setattr(report, k, collections.Counter(v) if k == "fallback_ops" else v)
    outer = _Holder(_function(meta["outer"], "the outer graph", blobs))
    parts = []
    for spec in meta["partitions"]:
        prep = PartitionReport(spec["name"], len(spec["ops"]), sum(1 for _, c in spec["ops"] if c),
                               ops=[tuple(o) for o in spec["ops"]], graph=report)
        report.partitions.append(prep)
        for op, compute in prep.ops:
            report.add_engine(op, compute)
        sub = _Holder(_function(spec["fallback"], f"{spec['name']} (its PyTorch fallback)", blobs))
        if "failed" in spec:
            part = _LoadedPartition(sub, spec, config, prep, None)
            part.run_in_pytorch(spec["failed"])
            prep.fail(spec["failed"])
        else:
            entry = bytes(blobs[spec["entry"]])
            try:
                C.read_entry_meta(entry)  # its container and checksum, before anything runs
            except C.UpdraftError as e:
                raise _corrupt(f"the engine graph of {spec['name']}: {e}") from None
            part = _LoadedPartition(sub, spec, config, prep, entry)
        setattr(outer, spec["target"], part)
        parts.append(part)
    if parts:
        graph = PartitionedGraph(outer, parts, list(meta["frozen"]), None, config, report, list(meta["names"]),
                                 list(meta.get("checked", [])))  # an artifact saved before "checked": none
    else:
        graph = _boxed(outer.forward)
    return PrecompiledGraph(graph, data=bytes(data))


class _Holder:
    """The `self` of a loaded graph's code: its submodules and tensor attributes, and `forward`."""

    def __init__(self, made: tuple) -> None:
        fn, attrs = made
        for k, v in attrs.items():
            setattr(self, k, v)
        self.forward = types.MethodType(fn, self)

    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)


def _function(spec: dict, what: str, blobs: list) -> tuple:
    glob: dict = {}
    for name, g in spec["globals"].items():
        glob[name] = _global_value(g, name, what)
    try:
        exec(compile(spec["src"], f"<updraft precompiled: {what}>", "exec"), glob)  # noqa: S102 (trusted: docstring)
        fn = glob["forward"]
    except Exception as e:
        raise _corrupt(f"the code of {what} does not run ({type(e).__name__}: {e})") from None
    attrs = {}
    if "attrs" in spec:
        raw = bytes(blobs[spec["attrs"]])
        if zlib.crc32(raw) != spec["attrs_crc"]:
            raise _corrupt(f"the tensor attributes of {what} do not match their checksum (corrupted)")
        attrs = torch.load(io.BytesIO(raw), weights_only=True)
    return fn, attrs


def _global_value(g: list, name: str, what: str) -> Any:
    kind = g[0]
    try:
        if kind == "module":
            return importlib.import_module(g[1])
        if kind == "value":
            return g[1]
        if kind == "float":
            return float(g[1])
        if kind == "nonetype":
            return type(None)
        if kind == "device":
            return torch.device(g[1])
        if kind == "torch":
            return getattr(torch, g[1])
        if kind == "import":
            return _resolve(g[1], g[2])
    except (ImportError, AttributeError) as e:
        raise PrecompileError(f"[updraft.precompile] {what} uses {name} ({g[1:]}), which this process cannot "
                              f"import ({type(e).__name__}: {e}); install what the saving process had") from None
    raise _corrupt(f"{what} names {name} with an unknown kind {kind!r}")


class _LoadedPartition(EnginePartition):
    """An engine partition from a saved entry: its build binds the call's parameters to the
    entry and replays the folds (no lowering, no passes); its PyTorch fallback is the saved code."""

    def __init__(self, sub: Any, spec: dict, config: CompilerConfig, report: PartitionReport,
                 entry: Optional[bytes]) -> None:
        # The partition's own set-up (fields, profiler registration), with the saved tuple flag.
        super().__init__(sub, spec["const_kinds"], config, report, multi=bool(spec["multi"]))
        self._entry = entry
        self._key = spec.get("key", "")
        self._runtime_pos = list(spec.get("runtime_pos", []))
        self._size_pos = list(spec.get("size_pos", []))
        # The runtime inputs its engine graph takes in their memory order (input_orders); a
        # file saved before they existed has none.
        orders = spec.get("orders") or [None] * len(self._runtime_pos)
        if not isinstance(orders, list) or len(orders) != len(self._runtime_pos) or not all(
                o is None or (isinstance(o, list) and sorted(o) == list(range(len(o)))) for o in orders):
            raise _corrupt(f"{report.name}'s input orders {orders!r} are not one permutation (or none) per input")
        self._orders = {j: tuple(o) for j, o in zip(self._runtime_pos, orders) if o is not None}
        self._out_dtypes = [getattr(torch, d) for d in spec.get("out_dtypes", [])]

    def _build(self, args: tuple) -> _Built:
        from .cache import entry_params

        C = _c()
        t0 = time.perf_counter()
        params = entry_params(args, self._param_pos)
        cg, info = C.load_entry(self._entry, self._key, params, self.config.engine_options())
        from .lowerer import TORCH_DTYPES

        got = [TORCH_DTYPES[d] for d in cg.output_dtypes()]
        if got != self._out_dtypes:
            raise _corrupt(f"{self.report.name}'s engine graph returns {got}, its record says {self._out_dtypes}")
        rep = self.report
        rep.engine_compiles += 1
        rep.cache = "precompiled"
        rep.cache_folds = "replayed" if info["folded"] and not info["mapped"] else ("mapped" if info["folded"] else "")
        rep.compile_ms = cg.compile_ms
        rep.cache_ms = (time.perf_counter() - t0) * 1e3
        rep.num_inputs = len(self._runtime_pos) + len(self._size_pos)
        rep.num_constants = params.tensors
        return _Built(cg, self._runtime_pos, got, [args[j].dtype for j in self._runtime_pos], self._size_pos,
                      self._orders)


def serializable_guards(entries: list) -> list[bool]:
    """A guard_filter_fn keeping every guard torch can save with a precompiled function:
    torch.compile(..., options={"guard_filter_fn": updraft.precompile.serializable_guards}).

    torch's default for aot_compile drops guards on globals and guards whose own type it cannot
    serialise, but not guards that only derive such a type (BERT's forward has ID_MATCH ones:
    "ID_MATCH guard cannot be serialized"). This drops those too; what they checked (an
    object's identity, e.g. a config object) is then not checked on load."""
    from torch._dynamo.guards import CheckFunctionManager

    bad = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)
    return [not (e.is_global or e.guard_type in bad or bad.intersection(e.derived_guard_types or ()))
            for e in entries]


def input_guards(entries: list) -> list[bool]:
    """A guard_filter_fn for deployment: keeps the global state guards (grad mode, autocast:
    GLOBAL_STATE), the dynamic-shape relations (SHAPE_ENV) and the dtype/shape/stride guards of
    the tensors that are not parameters (the inputs, buffers); drops the rest, as
    torch.compiler.keep_portable_guards_unsafe does, and the parameters' tensor guards too.

    A parameter's dtype and shape are checked anyway when its partition binds it (the entry
    load refuses another dtype or shape), and rebuilding a guard per parameter is most of a
    load's time (BERT-base: 200 of them, docs/precompile.md). Like torch's *_unsafe filters,
    it trusts the model's code and attributes not to change between save and load."""
    keep = []
    for e in entries:
        if e.guard_type in ("GLOBAL_STATE", "SHAPE_ENV"):
            keep.append(True)
        else:
            keep.append(e.guard_type == "TENSOR_MATCH" and not e.is_global
                        and not isinstance(e.value, torch.nn.Parameter))
    return keep


__all__ = ["FORMAT_VERSION", "PrecompileError", "PrecompiledGraph", "capture", "input_guards", "requested",
           "serializable_guards"]
