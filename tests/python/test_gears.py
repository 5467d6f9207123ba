"""Gears (updraft/gears.py): plans for listed sizes of a dynamic dim at the first call, sizes
between gears padded up (where the caller gives pad values) and cut back, others on plans of
their own. Tolerance: f32 BERT layers, rtol=atol=1e-4 (padding changes only the summation
length of masked keys, whose probabilities are exactly 0)."""
import warnings

import pytest
import torch

import updraft
from updraft import CompilerConfig, Gear, get_backend


def _bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=500)
    return BertModel(cfg).eval()


def _inputs(length, batch=2):
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(1, 500, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2:] = 0  # a padded sequence of the user's own, too
    return ids, mask


def _plans():
    """Plans made so far: built, or made from a size bucket's template (range plans)."""
    return sum(p.plans_built + p.plans_instantiated for p in updraft.last_report().partitions)


def test_between_gears_pads_up_and_matches_eager():
    model = _bert()
    gear = Gear("input_ids", dim=1, sizes=(16, 32), pad={"input_ids": 0, "attention_mask": 0})
    # inference="engine": the plan counts below are the engine's, every call.
    compiled = torch.compile(model, backend=get_backend(CompilerConfig(gears=(gear,), inference="engine")),
                             dynamic=True)
    with torch.no_grad():
        for length in (10, 16, 20, 32, 40):
            ids, mask = _inputs(length)
            got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
            want = model(input_ids=ids, attention_mask=mask).last_hidden_state
            assert got.shape == want.shape
            keep = mask.bool()  # rows of masked tokens are not defined by the model
            torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-4)
            if length == 10:  # the first call planned both gears (plus the dynamic first trace)
                after_first = _plans()
            elif length in (16, 20, 32):
                assert _plans() == after_first, f"length {length} built a plan"
    assert _plans() > after_first  # 40 is above the largest gear: a plan of its own
    rep = updraft.last_report()
    assert "gears: input_ids dim 1" in str(rep) and "padding on" in str(rep)


def test_without_pad_values_sizes_between_gears_get_their_own_plans():
    model = _bert()
    gear = Gear("input_ids", dim=1, sizes=(16, 32))
    compiled = torch.compile(model, backend=get_backend(CompilerConfig(gears=(gear,))), dynamic=True)
    with torch.no_grad():
        ids, mask = _inputs(16)
        compiled(input_ids=ids, attention_mask=mask)
        before = _plans()
        ids, mask = _inputs(20)
        got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-4)
    assert _plans() > before
    assert "padding off" in str(updraft.last_report())


def test_padding_is_refused_when_an_input_with_the_dim_has_no_pad_value():
    model = _bert()
    gear = Gear("input_ids", dim=1, sizes=(16, 32), pad={"input_ids": 0})  # attention_mask missing
    compiled = torch.compile(model, backend=get_backend(CompilerConfig(gears=(gear,))), dynamic=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        ids, mask = _inputs(20)
        got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert any("'attention_mask' carries the dim but has no pad value" in str(w.message) for w in caught)
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-4)


def test_gear_config_errors():
    with pytest.raises(ValueError, match=r"\[updraft.config\] Gear.sizes"):
        Gear("x", dim=1, sizes=(0, 4))
    with pytest.raises(TypeError, match=r"\[updraft.config\] gears must be"):
        CompilerConfig(gears=("seq",))
    assert Gear("x", 1, (32, 8, 8)).sizes == (8, 32)
