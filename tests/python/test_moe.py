"""A tiny mixture-of-experts decoder from a transformers config (random weights), compiled with
backend="updraft": the router's top-k (ties as eager's), the expert grouping (sort, histc,
cumsum to int32, empty_like + index_put) and transformers' grouped matmul all run in the
engine, with no compute op left to PyTorch; logits match eager and greedy decoding picks the
same tokens."""
import pytest
import torch

import updraft

transformers = pytest.importorskip("transformers")

GEMM = dict(rtol=1e-4, atol=1e-4)


def _mixtral(experts=4, top_k=2):
    cfg = transformers.MixtralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=experts, num_experts_per_tok=top_k, max_position_embeddings=64)
    return transformers.MixtralForCausalLM(cfg).eval()


def _qwen2_moe():
    cfg = transformers.Qwen2MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
        shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_experts=8, num_experts_per_tok=2, max_position_embeddings=64, decoder_sparse_step=1)
    return transformers.Qwen2MoeForCausalLM(cfg).eval()


MODELS = {"mixtral": _mixtral, "mixtral_8x2": lambda: _mixtral(8, 2), "qwen2_moe": _qwen2_moe}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_moe_logits_in_engine(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    ids = torch.randint(0, 128, (2, 12))
    f = lambda i: model(i, use_cache=False).logits
    with torch.no_grad():
        ref = f(ids)
        compiled = torch.compile(f, backend="updraft")
        got = compiled(ids)
        got2 = compiled(ids)
    rep = updraft.last_report()
    assert rep.num_fallback_compute == 0, str(rep)
    torch.testing.assert_close(got, ref, **GEMM)
    torch.testing.assert_close(got2, ref, **GEMM)


def test_moe_router_ties():
    # Every token routed with equal router logits: top-k among equal values decides the experts.
    torch.manual_seed(0)
    model = _mixtral(8, 2)
    for layer in model.model.layers:
        layer.mlp.gate.weight.data.zero_()
    ids = torch.randint(0, 128, (1, 10))
    f = lambda i: model(i, use_cache=False).logits
    with torch.no_grad():
        ref = f(ids)
        got = torch.compile(f, backend="updraft")(ids)
    assert updraft.last_report().num_fallback_compute == 0
    torch.testing.assert_close(got, ref, **GEMM)


def test_moe_greedy_decode_matches_eager():
    torch.manual_seed(0)
    model = _mixtral()
    ids = torch.randint(0, 128, (1, 6))
    f = lambda i: model(i, use_cache=False).logits[:, -1]
    compiled = torch.compile(f, backend="updraft", dynamic=False)
    want, got = ids, ids
    with torch.no_grad():
        for _ in range(4):
            want = torch.cat([want, f(want).argmax(-1, keepdim=True)], dim=1)
            got = torch.cat([got, compiled(got).argmax(-1, keepdim=True)], dim=1)
            assert updraft.last_report().num_fallback_compute == 0
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("transposed", [False, True])
def test_grouped_mm_fallback_op(transposed):
    # The custom op alone: empty groups, rows past the last offset (0 in eager), int32 offsets
    # and the weight either as stored [E, K, N] or a transposed view of [E, N, K].
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    op = torch.ops.transformers.grouped_mm_fallback
    torch.manual_seed(0)
    x = torch.randn(20, 16)
    w = torch.randn(5, 24, 16) if transposed else torch.randn(5, 16, 24)
    offs = torch.tensor([4, 4, 11, 11, 17], dtype=torch.int32)
    f = (lambda a, b, o: op(a, b.transpose(-2, -1), offs=o) * 1) if transposed else (lambda a, b, o: op(a, b, offs=o) * 1)
    with torch.no_grad():
        ref = f(x, w, offs)
        got = torch.compile(f, backend="updraft")(x, w, offs)
    assert updraft.last_report().num_fallback_compute == 0, str(updraft.last_report())
    torch.testing.assert_close(got, ref, **GEMM)
    assert (got[17:] == 0).all()
