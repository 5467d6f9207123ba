"""Dynamic shapes in decode graphs: sizes no tensor input carries, dynamic indexing, and
sliding-window attention over a dynamic KV cache, each run by the engine from one compile.

A SymInt that Dynamo passes into a partition (an int argument, a cache position, `n + 1`
computed in PyTorch) becomes an engine size input when no tensor input has it as a dim: its
value binds the symbol, so arange(n + 1) or full((n,), ...) compile once and serve every n.
Every test checks each output against eager at several sizes and counts engine compiles with a
spy on `_C.compile` (one per EnginePartition build).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import updraft
from updraft import _C
from updraft.report import Report, set_collector

TOL = dict(rtol=1e-5, atol=1e-5)



def _no_warnings(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a partition that fails to compile warns
        return fn()


def _in_engine(rep, *ops):
    assert not rep.failed_partitions, str(rep)
    for op in ops:
        assert op not in rep.fallback_ops, str(rep)
        assert op in rep.engine_ops, str(rep)


def _sizes_from_int(x, n):
    # Both sizes come from n alone: no tensor input of the partition has a dim n or n + 1.
    pos = torch.arange(n + 1, dtype=torch.float32)
    return x.unsqueeze(-1) * pos + torch.full((n + 1,), 0.5), torch.ones(n, 3) * x.sum()


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_size_from_an_int_argument_compiles_once(engine_compiles, report, dynamic):
    compiled = torch.compile(_sizes_from_int, backend="updraft", dynamic=dynamic)
    x = torch.randn(2, 8)
    ns = (3, 5, 9, 12, 5)  # not 0 or 1: Dynamo specialises those to constants (a graph of their own)
    with torch.no_grad():
        for n in ns:
            got, want = _no_warnings(lambda: compiled(x, n)), _sizes_from_int(x, n)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, **TOL, msg=lambda m: f"n={n}: {m}")
    _in_engine(report, "aten.arange.start_step", "aten.full.default")
    # dynamic=True: one compile for every n. Automatic: a static graph for n=3, then n turns
    # dynamic at the second size and that one compile serves the rest.
    assert len(engine_compiles) == (1 if dynamic else 2), str(report)
    # The dynamic graph's partition: x and the size inputs n and n + 1, a plan per value of n.
    dyn_part = report.partitions[0 if dynamic else 1]
    assert dyn_part.num_inputs == 3 and dyn_part.plans_built == (4 if dynamic else 3), str(report)


def test_cache_position_window_slice(engine_compiles, report):
    """cache[:, :, pos - w + 1 : pos + 1] with pos a SymInt, and k[:, :, -w:] of a dynamic
    cache: sdpa over a sliding window of a KV cache that grows every step."""
    w = 4

    def fn(q, k, v, pos):
        kw, vw = k[:, :, pos - w + 1:pos + 1], v[:, :, pos - w + 1:pos + 1]
        a = torch.nn.functional.scaled_dot_product_attention(q, kw, vw)
        b = torch.nn.functional.scaled_dot_product_attention(q, k[:, :, -w:], v[:, :, -w:])
        return a + b

    compiled = torch.compile(fn, backend="updraft", dynamic=True)
    with torch.no_grad():
        for L in (6, 7, 9, 12, 20):
            q = torch.randn(1, 4, 1, 32)
            k, v = torch.randn(1, 4, L, 32), torch.randn(1, 4, L, 32)
            pos = L - 2
            torch.testing.assert_close(_no_warnings(lambda: compiled(q, k, v, pos)), fn(q, k, v, pos), **TOL)
    _in_engine(report, "aten._scaled_dot_product_flash_attention_for_cpu.default", "aten.slice.Tensor")
    assert len(engine_compiles) == 1, str(report)


def test_index_on_a_dynamic_dim(engine_compiles, report):
    """x[:, idx] where the indexed dim is dynamic; negative indices wrap with its size."""

    def fn(x, idx):
        return x[:, idx] * 2 + x[:, -1:]

    compiled = torch.compile(fn, backend="updraft", dynamic=True)
    idx = torch.tensor([0, -1, 2, -3])
    with torch.no_grad():
        for s in (5, 8, 13, 31):
            x = torch.randn(3, s, 4)
            torch.testing.assert_close(_no_warnings(lambda: compiled(x, idx)), fn(x, idx), **TOL)
    _in_engine(report, "aten.index.Tensor")
    assert len(engine_compiles) == 1, str(report)


def _sliding_window_decoder():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, sliding_window=6,
                                     max_position_embeddings=256)
    return transformers.MistralForCausalLM(cfg).eval()


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_sliding_window_decoder_generate_matches_eager(engine_compiles, report, dynamic):
    """Greedy generate past the sliding window (6) with a compiled forward: the same tokens as
    eager, every partition in the engine, and no engine compile per step."""
    model = _sliding_window_decoder()
    kw = dict(max_new_tokens=14, min_new_tokens=14, do_sample=False)
    ids = torch.randint(0, 128, (1, 5))
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="updraft", dynamic=dynamic)
        got = _no_warnings(lambda: model.generate(ids, **kw))
        ids2 = torch.randint(0, 128, (1, 9))
        got2 = _no_warnings(lambda: model.generate(ids2, **kw))
    assert torch.equal(got, want), (got, want)
    model.forward = model.forward._torchdynamo_orig_callable
    with torch.no_grad():
        assert torch.equal(got2, model.generate(ids2, **kw))
    _in_engine(report, "aten._scaled_dot_product_flash_attention_for_cpu.default")
    assert report.num_fallback_compute == 0, str(report)
    # One engine compile per partition (Dynamo's graphs: prefill, decode, and their recompiles),
    # none per step: the decode graph's one compile serves every cache length with a plan each.
    assert len(engine_compiles) == report.num_partitions == report.engine_compiles, str(report)
    assert max(p.plans_built for p in report.partitions) >= 10, str(report)


def test_size_inputs_through_the_compile_cache(engine_compiles, tmp_path):
    """A partition with size inputs stored and loaded again: the entry's graph keeps them
    (`%n: i64[] = s1`), and the loaded graph serves new values without compiling."""
    from updraft.cache import wait_for_writes

    backend = updraft.get_backend(updraft.CompilerConfig(cache_dir=str(tmp_path)))
    x = torch.randn(2, 8)
    with torch.no_grad():
        for run in range(2):
            torch._dynamo.reset()
            rep = Report()
            set_collector(rep)
            try:
                compiled = torch.compile(_sizes_from_int, backend=backend, dynamic=True)
                for n in ((3, 7) if run == 0 else (5, 11)):
                    for g, w in zip(_no_warnings(lambda: compiled(x, n)), _sizes_from_int(x, n)):
                        torch.testing.assert_close(g, w, **TOL)
            finally:
                set_collector(None)
            wait_for_writes()
            assert not rep.failed_partitions, str(rep)
            assert rep.partitions[0].cache.startswith("miss" if run == 0 else "hit"), str(rep)
    assert len(engine_compiles) == 1  # the second run loaded the entry
