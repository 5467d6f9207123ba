"""The partitioner never makes a model slower by its choices (issue 13, part 3):

- a node whose kernel would be a reference loop (no fast kernel for its dtype) stays in
  PyTorch when it is large, and says so in `explain`; small ones stay in the engine;
- an engine partition whose estimated saving does not cover its boundary (the cost rule,
  updraft/partition_cost.py) stays in PyTorch, with the estimate in `explain`;
- the report counts what really runs where: size arithmetic on SymInts is not an op, and a
  partition that fails is counted as fallback, not as engine.
Timings are not asserted here (benchmarks/partition_cost.py measures them); the decisions are.
"""
import pytest
import torch

import updraft
from updraft import partition_cost
from updraft.config import CompilerConfig
from updraft.lowerer import REFERENCE_KERNEL_MAX_NUMEL


def _reference_only_case():
    """(op, dtype, fn): an elementwise op whose CPU factory declines the dtype, found by asking
    the engine, so the test follows the kernels as they grow (and fails, rather than skips,
    once none is left)."""
    from updraft import _C

    # (engine op, its attributes, dtype, the same in torch on (a, b)); integer remainder and
    # floor_divide gained fast kernels in session 8, integer clamp has none yet.
    candidates = [("remainder", {}, torch.int64, lambda a, b: torch.remainder(a, b)),
                  ("floor_divide", {}, torch.int64, lambda a, b: torch.floor_divide(a, b)),
                  ("clamp", {"min": -100.0, "max": 100.0}, torch.int64, lambda a, b: torch.clamp(a + b, -100, 100)),
                  ("clamp", {"min": -100.0, "max": 100.0}, torch.int32, lambda a, b: torch.clamp(a + b, -100, 100))]
    for op, attrs, dt, fn in candidates:
        g = _C.Graph()
        name = {torch.int64: "i64", torch.int32: "i32"}[dt]
        ins = [g.add_input(x, name, [4096]) for x in ("a", "b")][: 1 if attrs else 2]
        try:
            out = g.add_node(op, ins, attrs)[0]
        except _C.UpdraftError:  # the engine does not take this op at this dtype at all
            continue
        if g.fast_kernel(out) is None:
            return op, dt, fn
    pytest.fail("[test] every candidate op has a fast CPU kernel now: add to the candidates an op and "
                "dtype whose CPU factory declines (g.fast_kernel(...) is None), so the rule stays tested")


class Binary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b):
        return self.fn(a, b) * 3


@pytest.mark.parametrize("numel", [64, 1 << 16])
def test_a_large_node_on_a_reference_kernel_stays_in_pytorch(numel):
    op, dt, fn = _reference_only_case()
    torch.manual_seed(0)
    a = torch.randint(-1000, 1000, (numel,), dtype=dt)
    b = torch.randint(1, 50, (numel,), dtype=dt)
    model = Binary(fn)
    rep = updraft.explain(model, a, b)
    compiled = torch.compile(model, backend="updraft")
    torch.testing.assert_close(compiled(a, b), model(a, b), rtol=0, atol=0)  # integers: exact
    reasons = " ".join(r for rs in rep.reasons.values() for r in rs)
    if numel >= REFERENCE_KERNEL_MAX_NUMEL:
        assert f"engine op {op} has no fast CPU kernel" in reasons, str(rep)
        assert rep.num_fallback_compute >= 1, str(rep)
    else:  # small: a reference loop costs less than the trip to PyTorch
        assert "no fast CPU kernel" not in reasons, str(rep)
        assert rep.num_fallback_compute == 0, str(rep)


def test_probe_names_the_fast_kernel_and_none_for_reference_only():
    from updraft import _C

    g = _C.Graph()
    x = g.add_input("x", "f32", [64, 64])
    y = g.add_node("add", [x, x])[0]
    assert g.fast_kernel(y).startswith("cpu_f32_add")
    s = g.add_input("s", "f32", ["s0", 64])  # symbolic sizes are probed at a made-up size
    assert g.fast_kernel(g.add_node("relu", [s])[0]) is not None
    with pytest.raises(updraft._C.UpdraftError, match="not a node's output"):
        g.fast_kernel(x)


class Islands(torch.nn.Module):
    """`rounds` x (k pointwise ops, then an add that config forces to PyTorch)."""

    def __init__(self, rounds: int, k: int):
        super().__init__()
        self.rounds, self.k = rounds, k

    def forward(self, x):
        for _ in range(self.rounds):
            for j in range(self.k):
                x = x * 1.0001 if j % 2 == 0 else torch.relu(x)
            x = x + 0.5
        return x


ISLANDS = ("aten.add",)


def test_one_op_partitions_between_pytorch_islands_stay_in_pytorch():
    x = torch.randn(8)
    model = Islands(4, 1)
    rep = updraft.explain(model, x, config=CompilerConfig(eager_ops=ISLANDS))
    assert rep.num_partitions == 0, str(rep)
    assert "would not pay for its boundary" in " ".join(rep.reasons["aten.mul.Tensor"]), str(rep)
    assert "cost rule:" in str(rep) and "saves ~" in str(rep), str(rep)
    # The rule off: the same graph is cut into four one-op partitions.
    off = updraft.explain(model, x, config=CompilerConfig(eager_ops=ISLANDS, partition_cost=False))
    assert off.num_partitions == 4, str(off)
    compiled = torch.compile(model, backend=updraft.get_backend(CompilerConfig(eager_ops=ISLANDS)))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_partitions_that_pay_are_kept():
    # Four fused pointwise ops per partition save more than the boundary costs.
    x = torch.randn(1 << 14)
    rep = updraft.explain(Islands(3, 4), x, config=CompilerConfig(eager_ops=ISLANDS))
    assert rep.num_partitions == 3 and rep.num_fallback_compute == 3, str(rep)
    # One convolution with a frozen weight: PyTorch reorders the weight every call.
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()
    rep = updraft.explain(conv, torch.randn(1, 64, 16, 16))
    assert rep.num_partitions == 1 and rep.coverage == 1.0, str(rep)


def test_estimate_counts_copies_of_non_contiguous_inputs():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(256, 256)
    gm = make_fx(f)(x.t())  # a transposed input: the engine copies it to contiguous first
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    strided = partition_cost.estimate(nodes, set())
    gm2 = make_fx(f)(x)
    dense = partition_cost.estimate([n for n in gm2.graph.nodes if n.op == "call_function"], set())
    assert strided.costs_us == pytest.approx(dense.costs_us + x.numel() * 4 / partition_cost.BYTES_PER_US)
    assert strided.saves_us == dense.saves_us


def test_size_arithmetic_is_not_counted_as_an_op():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * x.shape[0] + torch.arange(x.shape[1] + 1)[1:]

    compiled = torch.compile(M(), backend="updraft", dynamic=True)
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), M()(x))
    rep = updraft.last_report()
    g = rep.graphs[-1]
    assert g.shape_ops >= 1, str(rep)
    assert not any(op.startswith(("operator.", "aten.sym_", "torch.sym")) for op in rep.fallback_ops), str(rep)
    assert "size arithmetic on SymInts" in str(rep)


def test_a_failed_partition_counts_as_fallback(monkeypatch):
    from updraft import _C

    def broken(*args, **kwargs):
        raise _C.UpdraftError("[test] the engine compiler is broken for this test")

    monkeypatch.setattr(_C, "compile", broken)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    compiled = torch.compile(model, backend="updraft")
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="failed to compile"):
        torch.testing.assert_close(compiled(x), model(x))
    rep = updraft.last_report()
    assert rep.failed_partitions, str(rep)
    assert rep.num_engine_compute == 0 and rep.num_fallback_compute >= 2, str(rep)
    assert not rep.engine_ops, str(rep)
    assert any("its engine partition failed" in r for rs in rep.reasons.values() for r in rs), str(rep)
