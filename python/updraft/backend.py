"""The torch.compile backend.

    torch.compile(model, backend="updraft")                      # entry point, default config
    torch.compile(model, backend="updraft", options={"num_threads": 4})
    torch.compile(model, backend=updraft.get_backend(CompilerConfig(fallback=False)))

Dynamo graph -> AOTAutograd (core aten, minus the ops the engine runs natively) ->
  inference graph: partition + engine (parameters frozen into engine constants)
  training forward/backward graphs: run in PyTorch for now (the engine has no backward ops yet).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Optional

import torch
from torch import fx

from .config import CompilerConfig
from .partition import EnginePartition, partition_graph, warn_once
from .report import GraphReport, report_for_new_graph

aten = torch.ops.aten

# Ops the core-aten table would decompose but the engine runs as one op (docs/ops.md).
# convolution, addmm/mm/bmm, native_layer_norm, _softmax/_log_softmax, gelu and the pooling ops
# are not in core_aten_decompositions(), so they reach the lowering as they are.
NATIVE_OPS = (
    aten.silu.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.adaptive_avg_pool2d.default,
    aten.roll.default,  # slices + concat in the engine (the decomposition is index arithmetic)
)

_TRAINING_NOTE = ("training graph (inputs require grad): runs in PyTorch; the engine has no "
                  "backward ops yet")


def decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    for op in NATIVE_OPS:
        table.pop(op, None)
    return table


def _boxed(fn: Callable) -> Callable:
    def run(args: list) -> Any:
        return fn(*args)
    run._boxed_call = True
    return run


class CompiledGraph:
    """Boxed callable for one inference graph: the outer GraphModule with engine partitions.

    Frozen inputs (parameters/buffers) are engine constants. Dynamo reuses compiled code across
    module instances of the same class, and a parameter may be updated in place, so each call
    checks the frozen tensors' identity and version; on a change the partitions rebuild.
    (Measured on a 16-parameter MLP: ~2 us a call, almost all of it reading `_version`; a
    map/itemgetter version was no faster.) The outer GraphModule is ours and has no hooks, so
    it is called through `forward`, skipping nn.Module.__call__.
    """

    _boxed_call = True

    def __init__(self, gm: fx.GraphModule, parts: list[EnginePartition], frozen: list[int]) -> None:
        self.gm = gm
        self.parts = parts
        self.frozen = frozen
        self._bound: Optional[list] = None
        self._lock = threading.Lock()

    def __call__(self, args: list) -> Any:
        if self.frozen:
            bound = self._bound
            if bound is None or any(args[i] is not t or t._version != v for i, t, v in bound):
                self._rebind(args)
        return self.gm.forward(*args)

    def _rebind(self, args: list) -> None:
        with self._lock:
            bound = self._bound
            if bound is not None and all(args[i] is t and t._version == v for i, t, v in bound):
                return
            if bound is not None:
                for p in self.parts:
                    p.invalidate()
            self._bound = [(i, args[i], args[i]._version) for i in self.frozen]


def _frozen_inputs(gm: fx.GraphModule, config: CompilerConfig) -> list[int]:
    """Indices of gm's placeholders that are parameters/buffers (notes §1.3)."""
    if not config.freeze:
        return []
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    idx: set[int] = set()
    if tc is not None:
        if tc.params_flat:
            idx.update(range(len(tc.params_flat)))
        fw_meta = getattr(tc, "fw_metadata", None)
        if fw_meta is not None and fw_meta.static_input_indices:
            idx.update(fw_meta.static_input_indices)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return sorted(i for i in idx if i < len(placeholders)
                  and isinstance(placeholders[i].meta.get("val"), torch.Tensor))


def compile_inference(gm: fx.GraphModule, config: CompilerConfig, report: GraphReport) -> Callable:
    frozen = _frozen_inputs(gm, config)
    gm, parts = partition_graph(gm, config, report, set(frozen))
    if config.debug >= 1:
        print(f"[updraft] inference graph: {report.engine_compute} compute ops in the engine, "
              f"{report.fallback_compute} in PyTorch, {len(parts)} partition(s), "
              f"{len(frozen)} frozen inputs", file=sys.stderr)
        for op, reasons in report.reasons.items():
            print(f"[updraft]   eager {op}: {reasons[0]}", file=sys.stderr)
    if not parts:
        return _boxed(gm.forward)
    return CompiledGraph(gm, parts, frozen)


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
            graph_report.add_fallback(op_name(n), reason, is_compute(n))


def _make_compilers(config: CompilerConfig) -> dict:
    rep = report_for_new_graph()

    def inference_compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
        graph_report = rep.new_graph("inference")
        try:
            return compile_inference(gm, config, graph_report)
        except Exception as e:
            if not config.fallback:
                raise
            _record_all_in_pytorch(gm, graph_report,
                                   f"compile failed, graph runs in PyTorch: {type(e).__name__}: {e}")
            warn_once(f"[updraft.backend] compiling a graph failed ({type(e).__name__}: {e}); "
                      "running it in PyTorch. Set CompilerConfig(fallback=False) to raise instead.")
            return _boxed(gm.forward)

    def training_compiler(kind: str) -> Callable:
        def compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
            _record_all_in_pytorch(gm, rep.new_graph(kind), _TRAINING_NOTE)
            return _boxed(gm.forward)
        return compiler

    return dict(fw_compiler=training_compiler("training forward"),
                bw_compiler=training_compiler("training backward"),
                inference_compiler=inference_compiler)


def _compile(gm: fx.GraphModule, example_inputs: list, config: CompilerConfig) -> Callable:
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(decompositions=decompositions(), **_make_compilers(config))
    return backend(gm, example_inputs)


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
