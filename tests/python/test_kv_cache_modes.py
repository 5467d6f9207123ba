"""`dynamic=True` and gears with KV-cache generation (transformers `generate()` on a tiny Llama).

A gear resizes only the inputs whose dim is exactly its symbol. In a decode graph the KV cache's
length is tied to the attention mask's by the graph's shape guards, and a static cache is written
in place, so the backend refuses such gears at compile time with one warning (updraft/gears.py,
docs/decisions.md). In the prompt graph a gear on input_ids stays, but padding is turned off: the
graph keeps the last position's logits (logits_to_keep), which padding at the end would move.
Tokens must equal eager's (greedy, f32: logits differ by rounding only, far below the gaps argmax
decides on with random weights and a 1000-token vocabulary)."""
from __future__ import annotations

import warnings

import pytest
import torch

import updraft
import updraft.report
from updraft import CompilerConfig, Gear, get_backend

import transformers  # a pinned dependency (scripts/setup.sh): missing means a broken set-up, not a skip


@pytest.fixture
def report(report, monkeypatch):
    monkeypatch.setattr(updraft.report, "_warned", set())  # warn_once: each test hears its warnings
    return report


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


def _generate(model, prompt, new_tokens, batched=False, **kw):
    with torch.no_grad():
        if batched:  # two prompts, the second left-padded by 3 tokens
            prompt = prompt.repeat(2, 1)
            mask = torch.ones_like(prompt)
            prompt[1, :3], mask[1, :3] = 0, 0
            kw["attention_mask"] = mask
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=0, **kw)


def _run(gears, batched=False, new_tokens=8, **kw):
    """Eager's and the compiled model's tokens for two prompt lengths, and the warnings raised."""
    eager, model = _llama(), _llama()
    model.forward = torch.compile(model.forward, backend=get_backend(CompilerConfig(gears=gears)), dynamic=True)
    pairs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for length in (12, 7):
            prompt = torch.randint(0, 1000, (1, length))
            pairs.append((_generate(model, prompt, new_tokens, batched, **kw),
                          _generate(eager, prompt, new_tokens, batched, **kw)))
    return pairs, [str(w.message) for w in caught if "[updraft" in str(w.message)]


def _assert_ok(pairs, report):
    for got, want in pairs:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    failed = [p for p in report.partitions if p.status != "ok"]
    assert not failed, str(report)


def test_dynamic_true_generate_compiles_twice(report, engine_compiles):
    pairs, caught = _run(())
    _assert_ok(pairs, report)
    assert len(engine_compiles) <= 2, str(report)  # prefill and decode, whatever the lengths
    assert not caught, caught


def test_gear_on_input_ids_keeps_prompt_plans_without_padding(report):
    pad = {"input_ids": 0, "attention_mask": 0, "position_ids": 0}
    pairs, caught = _run((Gear("input_ids", dim=1, sizes=(16, 32), pad=pad),))
    _assert_ok(pairs, report)
    # Padding 12 up to 16 would return position 15's logits: refused, with the reason.
    assert any("padding for 'input_ids' dim 1 is off" in w and "counted from the end" in w for w in caught), caught
    text = str(report)
    assert "gears: input_ids dim 1" in text and "padding off" in text, text
    assert "is 1 in this graph (a one-token decode step?)" in text, text  # the decode graph: not applied


@pytest.mark.slow
def test_gear_on_the_attention_mask_is_refused_in_the_decode_graph(report, engine_compiles):
    pairs, caught = _run((Gear("attention_mask", dim=1, sizes=(16, 32, 64)),), batched=True)
    _assert_ok(pairs, report)
    refused = [w for w in caught if "the gear on 'attention_mask' dim 1 is refused" in w]
    assert len(refused) == 1, caught
    assert "is tied to it" in refused[0] and "cache_layers_" in refused[0], refused[0]
    assert "drop the gear" in refused[0] and "range plans" in refused[0], refused[0]
    assert len(engine_compiles) <= 2, str(report)


@pytest.mark.slow
def test_gear_with_a_static_cache_is_refused(report):
    pairs, caught = _run((Gear("input_ids", dim=1, sizes=(16, 32)),), cache_implementation="static")
    _assert_ok(pairs, report)
    refused = [w for w in caught if "the gear on 'input_ids' dim 1 is refused" in w]
    assert refused and "max_cache_len" in refused[0], caught


def test_a_gear_that_fails_to_warm_is_dropped_not_raised(report, monkeypatch):
    """The safety net: a warm-up run that raises drops the gear (one warning), the call runs."""
    from updraft.gears import GearBox

    monkeypatch.setattr(GearBox, "fits", lambda self, args: True)
    real = GearBox.resized

    def broken(self, args, target):  # inputs the graph cannot run on
        out = real(self, args, target)
        out[next(i for i, d, _ in self.carriers if d is not None)] = "not a tensor"
        return out

    monkeypatch.setattr(GearBox, "resized", broken)
    pairs, caught = _run((Gear("input_ids", dim=1, sizes=(16,)),), new_tokens=4)
    for got, want in pairs:
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert any("warming the gear on 'input_ids' dim 1 at size 16 failed" in w for w in caught), caught
