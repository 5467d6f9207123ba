"""Asking the engine whether it can run a node costs one lowering of that node (issue 15,
"Lower once"): a getitem reads its producer's probe instead of lowering the producer again,
and an engine op's shape function runs once per emit, the kernel question once per process.
The answers themselves (partitions, fallback reasons) are covered by test_partition_cost.py,
test_backend.py and the model tests."""
import collections

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import updraft
from updraft import _C, lowerer
from updraft.config import CompilerConfig
from updraft.support import EngineSupport

aten = torch.ops.aten


def _norm_and_stats(x, w, b):
    out, mean, rstd = aten.native_layer_norm.default(x, [16], w, b, 1e-5)
    return out.relu() + mean * rstd


def test_a_getitem_reuses_its_producers_probe(monkeypatch):
    gm = make_fx(_norm_and_stats, tracing_mode="fake")(torch.randn(4, 16), torch.randn(16), torch.randn(16))
    lowered = collections.Counter()
    real = lowerer.Lowerer.lower

    def counting(self, node):
        lowered[node.name] += 1
        return real(self, node)

    monkeypatch.setattr(lowerer.Lowerer, "lower", counting)
    support = EngineSupport(CompilerConfig())
    reasons = {n.name: support.reason(n) for n in gm.graph.nodes if n.op == "call_function"}
    norm = next(n.name for n in gm.graph.nodes if n.target is aten.native_layer_norm.default)
    getitems = [n for n, r in reasons.items() if n.startswith("getitem")]
    assert len(getitems) == 3 and all(reasons[g] is None for g in getitems), reasons
    assert lowered[norm] == 1, lowered  # its own check; the three getitems pick from it
    assert max(lowered.values()) == 1, lowered


def test_shape_functions_run_once_per_engine_op(monkeypatch):
    """check_op (a second run of the op's shape function, plus the kernel question) is asked
    once per (op, dtypes) in a process, not for every node again."""
    asked = collections.Counter()
    real = _C.check_op

    def spy(op, inputs, attrs):
        asked[(op, tuple(d for d, _ in inputs))] += 1
        return real(op, inputs, attrs)

    monkeypatch.setattr(_C, "check_op", spy)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(32, 32), torch.nn.ReLU())]).eval()
    x = torch.randn(8, 32)
    rep = updraft.explain(model, x, config=CompilerConfig(cache_dir=""))
    assert rep.graphs[-1].engine_compute == 8, str(rep)
    assert all(n == 1 for n in asked.values()), asked
    with torch.no_grad():
        got = torch.compile(model, backend=updraft.get_backend(CompilerConfig(cache_dir="")))(x)
    torch.testing.assert_close(got, model(x))
