"""sdpa over the projections' own layout (src/passes/fold_permute_sdpa.h): a transformer's head
transposes around attention (q, k, v [B, S, H, E] -> [B, H, S, E], the result back) become sdpa's
`seq_first`, and the engine graph keeps no permute copies for them. Checked end to end on HF
models with random weights against eager: BERT (self-attention with a padding mask, dynamic
sequence lengths), ViT (no mask) and Swin (window attention with a float mask of relative
position biases and shifted windows). Tolerance f32: rtol 1e-4, atol 1e-4 x max|eager| (two
layers of GEMMs summed in other orders than ATen's, ~1e-6 relative each; a wrong layout gives
errors of the order of the values).
"""
from __future__ import annotations

import pytest
import torch

import updraft
from updraft import profiler, zoo


def _engine_texts(report) -> list[str]:
    mine = {id(r) for r in report.partitions}
    return [p._state.cg.graph_text() for p in list(profiler._partitions)
            if id(p.report) in mine and getattr(p._state, "cg", None) is not None]


def _check(model, *inputs, attention: int, permutes_left: int = 0):
    torch.manual_seed(0)
    with torch.no_grad():
        want = zoo.first_tensor(model(*inputs))
        fast = torch.compile(model, backend="updraft", options={"inference": "engine", "cache_dir": ""})
        got = zoo.first_tensor(fast(*inputs))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    texts = _engine_texts(updraft.last_report())
    sdpa = [line for t in texts for line in t.splitlines() if "= sdpa(" in line]
    assert len(sdpa) == attention, sdpa
    assert all("seq_first=[0, 1, 2, 3]" in line for line in sdpa), sdpa
    permutes = [line for t in texts for line in t.splitlines() if "= permute(" in line]
    assert len(permutes) == permutes_left, permutes


def test_bert_attention_reads_its_projections_in_place():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 vocab_size=1000, max_position_embeddings=64)).eval()
    ids = torch.randint(0, 1000, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # padding: the mask broadcasts over heads and queries
    _check(model, ids, mask, attention=2)


def test_vit_attention_reads_its_projections_in_place():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    model = ViTModel(ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                               image_size=32, patch_size=8), add_pooling_layer=False).eval()
    # Left: the patch embedding's flatten-transpose ([1, 64, 16] -> [1, 16, 64]).
    _check(model, torch.randn(1, 3, 32, 32), attention=2, permutes_left=1)


@pytest.mark.parametrize("shift", [False, True], ids=["windows", "shifted"])
def test_swin_window_attention_reads_its_projections_in_place(shift):
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(0)
    # One stage of one or two blocks (the second shifts its windows: a float mask per window).
    cfg = SwinConfig(image_size=56, patch_size=4, embed_dim=32, depths=[2 if shift else 1], num_heads=[2],
                     window_size=7)
    model = SwinModel(cfg, add_pooling_layer=False).eval()
    # What is left: the window partition and reverse of each block (6-d permutes), and the
    # patch embedding's flatten-transpose.
    _check(model, torch.randn(1, 3, 56, 56), attention=2 if shift else 1, permutes_left=5 if shift else 3)
