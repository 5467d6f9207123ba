"""Range plans (CompilerConfig.range_plans, src/runtime/plan.h): `generate()` with the default
dynamic KV cache compiles a decode graph whose cache length grows by one on every step. The
engine builds one plan per size bucket (9-16, 17-32, ...) and makes the plan of every other
length from the bucket's template without a build, so after a first generation a second one
builds no plan at all; the report counts both. Tokens must equal eager's (greedy decoding,
f32: the logits differ by rounding only, far below the gaps argmax decides on with random
weights and a 1000-token vocabulary)."""
from __future__ import annotations

import pytest
import torch

import updraft

import transformers  # a pinned dependency (scripts/setup.sh): missing means a broken set-up, not a skip



def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


def _generate(model, prompt, new_tokens):
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=0)


def _decode_partition(rep):
    """The partition that ran the most sizes: the decode graph with a dynamic cache length."""
    parts = [p for p in rep.partitions if p.status == "ok"]
    assert parts, str(rep)
    return max(parts, key=lambda p: p.plans_built + p.plans_instantiated)


def _compiled_generate_matches_eager(build, prompt, new_tokens):
    """Two copies of a model from `build`, one eager and one with its forward compiled; greedy
    generate on both must give the same tokens. Returns (compiled model, eager's tokens)."""
    eager, model = build(), build()
    model.forward = torch.compile(model.forward, backend="updraft")
    want = _generate(eager, prompt, new_tokens)
    torch.testing.assert_close(_generate(model, prompt, new_tokens), want, rtol=0, atol=0)
    return model, want


def test_generate_builds_a_plan_per_bucket_then_none(report):
    prompt = torch.randint(0, 1000, (1, 12))
    model, want = _compiled_generate_matches_eager(_llama, prompt, 40)
    part = _decode_partition(report)
    assert part.range_plans == "on", str(report)
    # Cache lengths 13..51 after the static first steps: at most one exact plan and the
    # templates of 17-32, 33-64 (and 9-16) are built; every other length is an instance.
    assert part.plans_built <= 4, str(report)
    assert part.plans_instantiated >= 30, str(report)
    built = part.plans_built
    torch.testing.assert_close(_generate(model, prompt, 40), want, rtol=0, atol=0)
    assert part.plans_built == built, f"the second generation built plans: {report}"
    assert "range plans:" in str(report)


def test_batched_left_padded_generate_keeps_range_plans(report):
    """Batch 2 with a left-padded prompt: the decode graph expands the attention mask to
    [batch, 1, 1, cache length], a symbolic attribute. The expand kernel reads its sizes from
    the views (Kernel::reads_attrs), so the graph still qualifies."""
    eager = _llama()
    model = _llama()
    model.forward = torch.compile(model.forward, backend="updraft")
    prompt = torch.randint(1, 1000, (2, 12))
    mask = torch.ones_like(prompt)
    prompt[1, :4], mask[1, :4] = 0, 0

    def run(m):
        with torch.no_grad():
            return m.generate(prompt, attention_mask=mask, max_new_tokens=30, min_new_tokens=30, do_sample=False,
                              pad_token_id=0)

    want = run(eager)
    torch.testing.assert_close(run(model), want, rtol=0, atol=0)
    part = _decode_partition(report)
    assert part.range_plans == "on", str(report)
    # The mask's length is the cache's plus one, a symbol of its own, so it crosses a bucket
    # boundary one step before the cache does: one exact plan and up to two templates per
    # bucket (both symbols in it, or only the mask past it), against one plan per step.
    assert part.plans_built <= 7, str(report)
    assert part.plans_instantiated >= 20, str(report)
    built = part.plans_built
    torch.testing.assert_close(run(model), want, rtol=0, atol=0)
    assert part.plans_built == built, f"the second generation built plans: {report}"


def test_range_plans_off_builds_a_plan_per_length(report):
    model = _llama()
    model.forward = torch.compile(model.forward, backend="updraft", options={"range_plans": False})
    prompt = torch.randint(0, 1000, (1, 12))
    _generate(model, prompt, 24)
    part = _decode_partition(report)
    assert part.plans_instantiated == 0, str(report)
    assert part.plans_built >= 20, str(report)


def test_plan_options_are_validated():
    with pytest.raises(ValueError, match="plan_cache_size=0 must be >= 1"):
        updraft.CompilerConfig(plan_cache_size=0)
    with pytest.raises(TypeError, match="range_plans must be a bool"):
        updraft.CompilerConfig(range_plans="yes")
    assert updraft.CompilerConfig(plan_cache_size=64).engine_options()["plan_cache_size"] == 64


class _SlicedTables(torch.nn.Module):
    """Two tables sliced by the sequence length, as models write them: a position table cut to
    the length (`pos[:L]`: a static start, a symbolic end) and an ALiBi-style bias cut from the
    end (`alibi[..., max(0, T - L):]`, MPT: a symbolic start). torch sizes the second
    `T - max(0, T - L)` and proves it equal to L under a guard, which the lowering reads
    (lowerer.canonical_size): without it the add could not broadcast in the engine."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(64, 8))
        self.register_buffer("alibi", torch.randn(4, 1, 64))

    def forward(self, x):  # x: [2, L, 8]
        n = x.shape[1]
        y = x + self.pos[:n]
        bias = self.alibi[:, :, max(0, self.alibi.size(2) - n):]  # [4, 1, L]
        return y.sum(-1)[:, None, None, :] + bias  # [2, 4, 1, L]


def test_tables_sliced_by_the_length_keep_one_partition_and_range_plans(report):
    """Both slices run in the engine (one partition, nothing left to PyTorch) and their kernels
    evaluate their bounds per call from the plan's binding, so one range plan serves every
    length of a bucket."""
    torch.manual_seed(0)
    model = _SlicedTables()
    compiled = torch.compile(model, backend="updraft")
    for n in range(5, 41):
        x = torch.randn(2, n, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)
    assert report.num_fallback_compute == 0, str(report)
    part = _decode_partition(report)
    assert report.num_partitions == 2 and part.range_plans == "on", str(report)  # the static first call, then this
    # 35 lengths over the buckets 5-8, 9-16, 17-32 and 33-64: a template each, and an exact plan.
    assert part.plans_built <= 6 and part.plans_instantiated >= 29, str(report)


def _mpt():
    """MPT: ALiBi position bias sliced by the key length, attention written as matmuls (no sdpa)."""
    torch.manual_seed(0)
    cfg = transformers.MptConfig(d_model=64, n_heads=4, n_layers=2, expansion_ratio=2, vocab_size=1000,
                                 max_seq_len=256, use_cache=True)
    return transformers.MptForCausalLM(cfg).eval()


def test_attention_written_as_matmuls_decodes_on_range_plans(report):
    """MPT's decode step: the ALiBi slice's size is proven equal to the key length under torch's
    guards (lowerer.canonical_size; the graph was cut at every layer's add without it), its
    q k^T and p v over the growing cache run on the rows kernel (cpu/matmul_rows.cpp), and the
    slices evaluate their bounds per call, so the step keeps one partition and range plans."""
    _compiled_generate_matches_eager(_mpt, torch.randint(3, 1000, (1, 12)), 30)
    assert report.num_fallback_compute == 0, str(report)
    assert all(len(g.partitions) == 1 for g in report.graphs), str(report)
    part = _decode_partition(report)
    assert part.range_plans == "on", str(report)
    assert part.plans_instantiated >= 20, str(report)
