"""Which nodes of an aten graph the engine can run, and why not the others.

`EngineSupport` answers torch's partitioner node by node: not named in
CompilerConfig.eager_nodes (updraft.debug.bisect's switch) nor listed in
CompilerConfig.eager_ops, a lowering exists, the engine accepts every op the lowering emits
for the node's dtypes and shapes, and a large node gets a fast kernel (a reference kernel
would be slower than PyTorch). The answer comes from lowering the node alone, once, into a
throwaway engine graph (`_Probe`): what it reads is a graph input typed by its meta, and its
sizes may use any symbol, as the partition's inputs are not known yet (the partition's build
checks those again and runs in PyTorch if one is missing). A getitem continues in the probe of
its producer, whose outputs it picks, instead of lowering the producer again.

What it does not do: group nodes or weigh partitions (partition.py, partition_cost.py), or
build the engine graph a partition runs (engine_partition.py lowers the whole partition at
its first call, with real constants).
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
from torch import fx
from torch.fx.passes.operator_support import OperatorSupport

from .config import CompilerConfig
from .lowering import LOWERINGS, Unsupported, meta, op_name, tensor_type
from .lowerer import REFERENCE_KERNEL_MAX_NUMEL, Lowerer, load_c, lowering_for, numel_hint


class EngineSupport(OperatorSupport):
    """Supported = not listed in config.eager_ops, has a lowering, and the engine accepts it."""

    def __init__(self, config: CompilerConfig) -> None:
        super().__init__()
        self.config = config
        self.reasons: dict[fx.Node, Optional[str]] = {}
        self._probes: dict[fx.Node, _Probe] = {}

    def reason(self, node: fx.Node) -> Optional[str]:
        if node in self.reasons:
            return self.reasons[node]
        name = op_name(node)
        if node.op != "call_function":
            r = f"{node.op} node"
        elif node.name in self.config.eager_nodes:
            r = "eager_nodes (bisect)"
        elif name in self.config.eager_ops or name.rsplit(".", 1)[0] in self.config.eager_ops:
            r = "listed in CompilerConfig.eager_ops"
        else:
            r = self._check(node)
        if r is None and node.target is operator.getitem:
            parent = node.args[0]
            if isinstance(parent, fx.Node) and self.reason(parent) is not None:
                r = "its producer runs in PyTorch"
        self.reasons[node] = r
        return r

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        return self.reason(node) is None

    def _check(self, node: fx.Node) -> Optional[str]:
        """None if the engine can run `node` (a call_function); otherwise the reason."""
        if lowering_for(node.target) is None:
            return f"no lowering for {op_name(node)}"
        val = meta(node)
        vals = val if isinstance(val, (list, tuple)) else [val]
        try:
            for v in vals:
                if v is not None:
                    tensor_type(v)
            for inp in node.all_input_nodes:
                m = meta(inp)
                if isinstance(m, torch.Tensor):
                    tensor_type(m)
        except Unsupported as e:
            return str(e)
        src = node.args[0] if node.target is operator.getitem else None
        if not isinstance(src, fx.Node):
            return _wording(self._probe(node).error, node)
        if src.op == "call_function" and src.target in LOWERINGS:
            probe = self._probe(src)
            if probe.error is not None:
                return _wording(probe.error, node)
            # Picks the producer's output where the producer's probe left it.
            return _wording(probe.run(lambda: probe.lower(node), src), node)
        probe = _Probe()  # the producer runs in PyTorch (reason() says so): the item is an input
        return _wording(probe.run(lambda: probe.bind_input(node)), node)

    def _probe(self, node: fx.Node) -> "_Probe":
        """`node` lowered alone, once (its own check and its getitems share it)."""
        probe = self._probes.get(node)
        if probe is None:
            probe = self._probes[node] = _Probe()
            probe.error = probe.run(lambda: probe.lower(node), node)
        return probe


def _wording(error: Optional[BaseException], node: fx.Node) -> Optional[str]:
    """None if the probe succeeded; otherwise why, worded for `node`."""
    if error is None:
        return None
    if isinstance(error, Unsupported):
        return str(error)
    return f"lowering {op_name(node)} failed ({type(error).__name__}: {error}); please report this"


def _large(node: fx.Node) -> bool:
    """Whether `node` is too large for a reference kernel (REFERENCE_KERNEL_MAX_NUMEL); sizes by
    their hints, so an arange over a dynamic sequence length counts as the small op it is."""
    val = meta(node)
    outs = [v for v in (val if isinstance(val, (list, tuple)) else [val]) if isinstance(v, torch.Tensor)]
    return max([numel_hint(v) for v in outs] +
               [numel_hint(meta(i)) for i in node.all_input_nodes if isinstance(meta(i), torch.Tensor)],
               default=0) >= REFERENCE_KERNEL_MAX_NUMEL


class _Probe(Lowerer):
    """A throwaway engine graph in which one node is lowered alone: any value it reads that is
    not bound yet becomes a graph input typed by its meta, and sizes may use any symbol."""

    def __init__(self) -> None:
        super().__init__(load_c().Graph())
        self.error: Optional[BaseException] = None  # of the probed node's own lowering
        self._large = False  # the node being lowered is too large for a reference kernel

    def _unbound(self, node: fx.Node) -> int:
        return self.bind_input(node)

    def _missing_symbols(self, expr: Any, missing: list[str]) -> None:
        pass

    def emit(self, op: str, inputs: list[int], **attrs: Any) -> list[int]:
        outs = super().emit(op, inputs, **attrs)
        if self._large and self.g.fast_kernel(outs[0]) is None:
            # Never slower than eager by choice: a node the runtime would run on a reference
            # kernel (no fast kernel for its dtype, e.g. f64 math) is left to PyTorch.
            dts = "/".join(sorted({self.g.value_type(i)[0] for i in inputs})) or "no inputs"
            raise Unsupported(f"engine op {op} has no fast CPU kernel for {dts}; its reference kernel "
                              "would be slower than PyTorch")
        return outs

    def run(self, lower: Any, node: Optional[fx.Node] = None) -> Optional[BaseException]:
        """Runs `lower()` and returns its failure, if any; when `node` is large, every op
        lowered meanwhile needs a fast kernel."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        self._large = node is not None and _large(node)
        # The compiler runs under AOT's fake mode; constants made while probing must be real.
        with unset_fake_temporarily():
            try:
                lower()
            except Exception as e:  # a lowering's own bug must not stop the partitioner
                return e
        return None
