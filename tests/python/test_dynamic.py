"""Dynamic shapes: one engine compile serves every size of the dynamic dims.

Every test counts engine compiles with a spy on `_C.compile` (each EnginePartition build calls
it once) and checks every output against eager PyTorch.

Tolerance rtol=atol=1e-4: the engine computes in f32 like eager, but oneDNN's matmul blocking
and the engine's fused softmax/layer-norm sum in a different order than PyTorch's kernels;
over a few transformer layers those float32 rounding differences reach ~1e-5 relative, with
headroom for layer norm amplifying them. A wrong shape or a mis-sliced row differs by O(1).
"""
from __future__ import annotations

import pytest
import torch

import updraft
from updraft import _C

transformers = pytest.importorskip("transformers")

TOL = dict(rtol=1e-4, atol=1e-4)


def _small_bert(layers: int = 2):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(num_hidden_layers=layers, hidden_size=64, num_attention_heads=4,
                                intermediate_size=128)).eval()


def _small_gpt2():
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=4)).eval()


def _check_single_partition(rep) -> None:
    assert rep.num_partitions == 1, str(rep)
    assert not rep.failed_partitions, str(rep)
    # Views to [s0, s1, heads, head_dim] used to stay in PyTorch and split the graph.
    assert "aten.view.default" not in rep.fallback_ops, str(rep)
    assert rep.num_fallback_compute == 0, str(rep)


def _run_shapes(model, compiled, shapes, vocab=100):
    with torch.no_grad():
        for batch, seq in shapes:
            ids = torch.randint(0, vocab, (batch, seq))
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state,
                                       **TOL, msg=lambda m: f"batch={batch} seq={seq}: {m}")


def test_dynamic_bert_one_compile_many_shapes(engine_compiles):
    model = _small_bert()
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    # Batch sizes >= 2: Dynamo specialises a size-1 dim to a constant (a separate graph).
    shapes = [(b, s) for b in (2, 3) for s in (8, 13, 32, 77, 128)]
    _run_shapes(model, compiled, shapes)
    rep = updraft.last_report()
    _check_single_partition(rep)
    assert len(engine_compiles) == 1, str(rep)
    assert rep.engine_compiles == 1
    _check_plans(rep.partitions[0], len(shapes))
    assert rep.partitions[0].plan_ms > 0


def _check_plans(part, shapes: int) -> None:
    """One memory plan per shape signature: built, or made without a build from its size
    bucket's template (range plans: the graph qualifies since the slice of BERT's position ids
    evaluates its end per call). A template is built once per bucket, not per shape."""
    assert part.range_plans == "on" and part.plans_instantiated > 0, part
    assert part.plans_built + part.plans_instantiated >= shapes and part.plans_built < shapes, part


def test_dynamic_gpt2_single_partition(engine_compiles):
    model = _small_gpt2()
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    _run_shapes(model, compiled, [(2, 8), (2, 21), (3, 64), (2, 8)])
    rep = updraft.last_report()
    _check_single_partition(rep)
    assert len(engine_compiles) == 1, str(rep)
    assert rep.plans_built == 3, str(rep)  # (2, 8) repeats: served by its cached plan
    p = rep.partitions[0]
    # Later shapes take most kernels from the compile's cache (the report shows both counts).
    assert p.kernels_reused > p.kernels_created > 0 and "reused" in str(rep), str(rep)


def test_mark_dynamic_serves_other_sizes_without_recompiling(engine_compiles):
    model = _small_bert()
    compiled = torch.compile(model, backend="updraft")
    ids = torch.randint(0, 100, (2, 16))
    torch._dynamo.mark_dynamic(ids, 0)
    torch._dynamo.mark_dynamic(ids, 1)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state, **TOL)
    _run_shapes(model, compiled, [(3, 24), (4, 9), (2, 40)])
    _check_single_partition(updraft.last_report())
    assert len(engine_compiles) == 1


def test_automatic_dynamic_recompiles_once_then_serves_all_sizes(engine_compiles):
    model = _small_bert()
    compiled = torch.compile(model, backend="updraft")  # dynamic=None: Dynamo's automatic mode
    _run_shapes(model, compiled, [(2, 16)])
    assert len(engine_compiles) == 1  # static graph
    # Both sizes change: Dynamo recompiles once, marking exactly the dims that changed dynamic
    # (changing only seq here would leave batch static and recompile again when it changes).
    _run_shapes(model, compiled, [(3, 24)])
    assert len(engine_compiles) == 2
    rep = updraft.last_report()
    _check_single_partition(rep)
    _run_shapes(model, compiled, [(3, 20), (2, 40), (5, 33)])
    assert len(engine_compiles) == 2, str(updraft.last_report())


def test_dynamic_factories_and_slices_match_eager(engine_compiles):
    """Sizes built from dynamic dims: full/ones (expand of a scalar), arange (cumsum), a slice
    of a table to the sequence length, and a view to two dynamic dims."""

    table = torch.randn(64, 8)

    def fn(x):
        b, s, _ = x.shape
        pos = torch.arange(s) * 2 + 1
        ones = torch.ones(b, s, 1)
        y = x + table[:s] + pos[None, :, None].float() * ones
        return y.view(b, s, 2, 4).transpose(1, 2).reshape(b * 2, s, 4)

    compiled = torch.compile(fn, backend="updraft", dynamic=True)
    with torch.no_grad():
        for b, s in [(2, 5), (3, 17), (2, 64), (4, 3)]:
            x = torch.randn(b, s, 8)
            torch.testing.assert_close(compiled(x), fn(x), **TOL)
    rep = updraft.last_report()
    assert rep.num_partitions == 1 and not rep.failed_partitions, str(rep)
    assert len(engine_compiles) == 1, str(rep)
    for op in ("aten.arange.start_step", "aten.arange.default", "aten.full.default", "aten.slice.Tensor",
               "aten.view.default", "aten.expand.default"):
        assert op not in rep.fallback_ops, str(rep)


def test_new_shapes_reuse_the_compiles_kernels(monkeypatch):
    """Plans for new shapes share the kernels of earlier ones (runtime/cross_shape_cache.h). Every
    linear (a runtime-M oneDNN matmul), attention, norm and elementwise kernel is built once.
    The slice of the position-id table to [:, :s1] evaluates its end per call from the plan's
    binding, so the graph takes range plans (runtime/plan.h): each new shape is an instance of its size
    bucket's template, and fewer kernels are made than there are new sizes (one per new length
    and one per new batch before)."""
    graphs = []
    real = _C.compile

    def spy(graph, options=None):
        graphs.append(real(graph, options if options is not None else {}))
        return graphs[-1]

    monkeypatch.setattr(_C, "compile", spy)
    torch._dynamo.reset()
    model = _small_bert()
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    _run_shapes(model, compiled, [(2, 8)])
    assert len(graphs) == 1
    cg = graphs[0]
    first = cg.kernels_created
    assert "runtime_m" in cg.plan_text([[2, 8]])
    shapes = [(2, 13), (3, 32), (2, 77), (4, 5), (3, 128), (2, 8)]
    _run_shapes(model, compiled, shapes)
    assert len(graphs) == 1
    # (2, 8) repeats; every other shape is an instance of its bucket's template.
    assert cg.plans_instantiated >= 5, cg.plans_instantiated
    new_lengths = len({s for _, s in shapes} - {8})
    new_batches = len({b for b, _ in shapes} - {2})
    assert cg.kernels_created - first < new_lengths + new_batches, cg.plan_text([[2, 8]])
    assert cg.kernels_reused >= 3 * (first - 2)  # the templates take the first plan's kernels
    torch._dynamo.reset()


@pytest.mark.slow
def test_bert_base_many_lengths_and_batches_one_compile(engine_compiles):
    """Ten lengths from 8 to 512 at two batch sizes: one engine compile, one plan per shape.
    (Twenty lengths at three batches took five minutes of CI for no more coverage.)"""
    from updraft import zoo

    model, _ = zoo.build("bert")
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    lengths = [8, 12, 24, 40, 64, 112, 160, 256, 384, 512]
    shapes = [(b, s) for b in (2, 3) for s in lengths]
    _run_shapes(model, compiled, shapes, vocab=model.config.vocab_size)
    rep = updraft.last_report()
    _check_single_partition(rep)
    assert len(engine_compiles) == 1, str(rep)
    _check_plans(rep.partitions[0], len(shapes))


def test_clamp_to_a_dynamic_size_falls_back_with_a_reason():
    """clip_boxes_to_image: clamp(max=<image width>) with a symbolic width. The bound is only
    known at run time, so the clamp stays in PyTorch with a reason, and the rest of the graph
    still compiles (a lowering's TypeError once sent the whole graph to PyTorch)."""
    class Clip(torch.nn.Module):
        def forward(self, boxes, image):
            w = image.shape[-1]
            return (boxes * 2).clamp(min=0, max=w) + 1

    # The cost rule off: the mul and add around the clamp are one-op partitions it would
    # rightly leave to PyTorch; this test is about the clamp's lowering.
    compiled = torch.compile(Clip(), backend=updraft.get_backend(updraft.CompilerConfig(partition_cost=False)),
                             dynamic=True)
    with torch.no_grad():
        for n in (5, 9):
            boxes, image = torch.randn(n, 4) * 20, torch.randn(3, n + 2, n + 3)
            torch.testing.assert_close(compiled(boxes, image), Clip()(boxes, image))
    rep = updraft.last_report()
    reasons = " ".join(r for rs in rep.reasons.values() for r in rs)
    assert "clamp with a dynamic max bound" in reasons, str(rep)
    assert rep.num_engine_compute >= 1 and not rep.failed_partitions, str(rep)
