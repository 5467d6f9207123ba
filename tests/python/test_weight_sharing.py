"""One copy of the weights per process: the prefill and decode graphs of a language model share
their prepacked weights (src/kernels/onednn/packed_weights.h), and the report says how many
bytes the engine holds."""
from __future__ import annotations

import gc

import pytest
import torch

import updraft
from updraft import zoo
from updraft.report import weight_stats


def _linear_weight_bytes(model: torch.nn.Module) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_prefill_and_decode_share_one_copy_of_the_weights():
    """The small zoo Llama, one compiled step per token with the cache as tensors: a prefill graph
    and a decode graph. Tokens equal eager's (greedy, so any error that changes an argmax fails),
    and the prepacked bytes added are at most one copy of the linear weights, with the decode
    graph's kernels reading the prefill graph's copies."""
    gc.collect()
    before = weight_stats()
    torch.manual_seed(0)
    step = zoo.causal_lm("llama", layers=2)
    prompt = torch.randint(0, step.model.config.vocab_size, (1, 8))
    with torch.no_grad():
        want = zoo.greedy_decode(step, prompt, 8)
        torch._dynamo.reset()
        compiled = torch.compile(step, backend="updraft")
        got = zoo.greedy_decode(compiled, prompt, 8)
    assert torch.equal(got, want), f"compiled {got.tolist()}\neager    {want.tolist()}"
    after = weight_stats()
    one_copy = _linear_weight_bytes(step)
    added = after["bytes"] - before["bytes"]
    rep = updraft.last_report()
    # Blocked layouts pad N and K up to their block (a few percent at these sizes).
    assert added <= 1.1 * one_copy, f"{added} prepacked bytes for {one_copy} bytes of linear weights\n{rep}"
    assert after["hits"] > before["hits"], f"no graph read another's packed copy: {after}"
    w = rep.weights
    assert w["packed"] == after
    assert w["param_bytes"] > 0 and w["folded_bytes"] < 0.05 * one_copy, w
    assert "prepacked copies" in str(rep)


@pytest.mark.parametrize("out_features,rows", [(120, 8), (384, 8), (384, 2)])
def test_a_changed_parameter_is_never_read_stale(out_features, rows):
    """An in-place parameter update rebuilds the graph (backend.py); the rebuilt kernels must not
    read the packed copy of the old values. 120 outputs: a weight small enough to leave to
    oneDNN, which packs it, and packs the new values again. 384: the f32 linear that reads the
    parameter in place at any row count (src/kernels/cpu/linear_stream.h) and packs nothing."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(512, out_features), torch.nn.ReLU()).eval()
    x = torch.randn(rows, 512)
    f = torch.compile(m, backend="updraft")
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
        packs = weight_stats()["packs"]
        m[0].weight.mul_(-0.5)
        # f32 gemm, K = 512: blocked summation order differs from torch's by a few ulps.
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    packed = out_features * 512 < 1 << 16  # kStreamMinWeight
    assert (weight_stats()["packs"] > packs) == packed


@pytest.mark.parametrize("prepack", [False])
def test_in_place_weights_hold_no_copy(prepack):
    """prepack_weights=False: the engine reads the caller's parameters in place; nothing is packed."""
    gc.collect()
    before = weight_stats()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 192), torch.nn.GELU(), torch.nn.Linear(192, 64)).eval()
    x = torch.randn(3, 256)
    f = torch.compile(m, backend=updraft.get_backend(updraft.CompilerConfig(prepack_weights=prepack)))
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    assert weight_stats()["packs"] == before["packs"]
