"""nn.TransformerEncoderLayer / nn.TransformerEncoder / nn.MultiheadAttention in eval mode under
no_grad: PyTorch's fused fast path (aten._transformer_encoder_layer_fwd) lowered to engine ops,
vs eager, with key padding and attention masks, norm_first, relu/gelu, and rows whose keys are
all padded (eager's fast path returns them NaN; so must the engine)."""
import itertools

import pytest
import torch

import updraft

TOL = dict(rtol=1e-4, atol=1e-5, equal_nan=True)


def _run(f, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        ref = f(*args)
        compiled = torch.compile(f, backend="updraft")
        got = compiled(*args)
        got2 = compiled(*args)
    torch.testing.assert_close(got, ref, **TOL)
    torch.testing.assert_close(got2, ref, **TOL)
    assert torch.equal(got.isnan(), ref.isnan())
    return updraft.last_report()


def _masks(B, L):
    kpm = torch.zeros(B, L, dtype=torch.bool)
    kpm[1, L - 2:] = True
    kpm[2, :] = True  # every key padded: eager's fast path gives NaN rows
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    return kpm, causal


@pytest.mark.parametrize("norm_first,activation", list(itertools.product([False, True], ["relu", "gelu"])))
@pytest.mark.parametrize("masks", ["none", "key_padding", "attn", "both"])
def test_encoder_layer_fast_path(norm_first, activation, masks):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first,
                                             activation=activation).eval()
    x = torch.randn(3, 6, 32)
    kpm, causal = _masks(3, 6)
    f, args = {
        "none": (lambda x: layer(x), (x,)),
        "key_padding": (lambda x, k: layer(x, src_key_padding_mask=k), (x, kpm)),
        "attn": (lambda x, m: layer(x, src_mask=m), (x, causal)),
        "both": (lambda x, m, k: layer(x, src_mask=m, src_key_padding_mask=k), (x, causal, kpm)),
    }[masks]
    rep = _run(f, *args)
    assert rep.num_fallback_compute == 0, str(rep)


def test_encoder_stack():
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu"), 3,
        enable_nested_tensor=False).eval()
    x = torch.randn(2, 7, 32)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, 5:] = True
    rep = _run(lambda x, k: enc(x, src_key_padding_mask=k), x, kpm)
    assert rep.num_fallback_compute == 0, str(rep)


@pytest.mark.parametrize("with_mask", [False, True])
def test_multihead_attention(with_mask):
    # Under torch.compile, Dynamo traces MultiheadAttention's Python path, not the fused fast
    # path eager takes: a query whose keys are all padded comes out 0 from the traced graph
    # (torch.compile(backend="eager") too) but NaN from eager's fast path. The engine receives
    # the traced graph, so it is held to that graph's answer there and to eager's elsewhere.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(3, 6, 32)
    kpm, _ = _masks(3, 6)
    if not with_mask:
        rep = _run(lambda x: mha(x, x, x, need_weights=False)[0], x)
        assert rep.num_fallback_compute == 0, str(rep)
        return
    f = lambda x, k: mha(x, x, x, key_padding_mask=k, need_weights=False)[0]
    with torch.no_grad():
        ref = f(x, kpm)
        traced = torch.compile(f, backend="eager")(x, kpm)
        torch._dynamo.reset()
        got = torch.compile(f, backend="updraft")(x, kpm)
    assert updraft.last_report().num_fallback_compute == 0
    torch.testing.assert_close(got[:2], ref[:2], **TOL)
    assert ref[2].isnan().all() and (traced[2] == 0).all()
    torch.testing.assert_close(got[2], traced[2], **TOL)
