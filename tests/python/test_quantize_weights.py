"""updraft.quantize_weights (docs/quantization.md, "The model's own weights"): a model's linear
layers and embeddings stored as int8 (per row), int4 (per group of 32) or bf16, the f32 weights
released; eager PyTorch computes with the dequantised weights, and the engine reads the compact
ones in place (linear_wq) and must give the same results as eager on that model."""
import gc
import weakref

import pytest
import torch

import updraft
from updraft import CompilerConfig
from updraft.quantize import (QuantizedEmbedding, QuantizedLinear, dequantize_int4, quantize_rows_int4,
                              quantize_rows_int8)
from updraft.zoo import _llama_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _llama(layers=2):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_llama_config(layers)).eval()


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=2, n_head=4, vocab_size=4000, n_positions=128,
                                      bos_token_id=0, eos_token_id=0)).eval()


def _engine_logits(model, ids, config=None):
    torch._dynamo.reset()
    fast = torch.compile(model, backend=updraft.get_backend(config or CompilerConfig(inference="engine")))
    with torch.no_grad():
        return fast(ids, use_cache=False).logits


def test_int8_format_is_the_engines():
    """Bit for bit the engine's quantize_rows, edge rows included: the f32 model compiled with
    weight_dtype="int8" and the model quantised here compute the same logits exactly."""
    w = torch.randn(6, 300)
    w[1] = 0.0                       # a row of zeros: scale 0, q 0
    w[2, 5], w[2, 7] = float("inf"), -float("inf")   # saturate to +-127, scale from the finite values
    w[3, 9] = float("nan")           # NaN becomes 0
    w[4, :2] = torch.tensor([2.5, -2.5]) * (w[4].abs().max() / 127)  # exact halves round to even
    q, s = quantize_rows_int8(w)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and q.shape == w.shape and s.shape == (6,)
    assert s[1] == 0 and (q[1] == 0).all()
    assert q[2, 5] == 127 and q[2, 7] == -127 and torch.isfinite(s[2])
    assert q[3, 9] == 0
    assert q.min() >= -127
    finite = torch.isfinite(w) & (s[:, None] > 0)
    err = (q.float() * s[:, None] - w).abs()[finite]
    assert (err <= (s[:, None].expand_as(w)[finite] / 2) * (1 + 1e-6)).all()  # within half a step

    model = _llama()
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    want = _engine_logits(model, ids, CompilerConfig(weight_dtype="int8"))
    updraft.quantize_weights(model, "int8", embeddings=False)
    got = _engine_logits(model, ids)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_int4_format_is_the_engines():
    """Bit for bit the engine's quantize_block_int4: groups of 32 with their own scales, two
    groups per 32 bytes, edge groups included; the f32 model compiled with weight_dtype="int4" and
    the model quantised here compute the same logits (to the summation order of a fused QKV)."""
    w = torch.randn(5, 128)
    w[0, 32:64] = 0.0                # a group of zeros: scale 0, q 0 (stored 8)
    w[1, 3], w[1, 40] = float("inf"), -float("inf")  # saturate to +-7, scale from the finite values
    w[2, 70] = float("nan")          # NaN becomes 0
    w[3, 96:128] = torch.randn(32).clamp(-3, 3)
    w[3, 100], w[3, 96], w[3, 97] = 7.0, 2.5, -3.5  # scale 1: exact halves round to even
    q, s = quantize_rows_int4(w)
    assert q.dtype == torch.uint8 and q.shape == (5, 64) and s.dtype == torch.bfloat16 and s.shape == (5, 4)
    assert s[0, 1] == 0 and ((q[0, :32] >> 4) == 8).all()         # group 1 is block 0's high nibbles
    assert (q[1, 3] & 0xF) == 15 and (q[1, 8] >> 4) == 1          # +7 in group 0, -7 in group 1 (k = 40)
    assert torch.isfinite(s[1]).all()
    assert ((q[2, 38] & 0xF) == 8) and torch.isfinite(s[2, 2])    # k = 70: block 1, group 0, byte 6
    assert (q[3, 32] >> 4) == 10 and (q[3, 33] >> 4) == 4         # 2.5 -> 2, -3.5 -> -4 (half to even)
    deq = dequantize_int4(q, s)
    finite = torch.isfinite(w)
    step = s.float().repeat_interleave(32, dim=1)
    assert ((deq - w).abs()[finite] <= step[finite] / 2 * (1 + 1e-6)).all()  # within half a step
    assert torch.equal(dequantize_int4(q[2:4], s[2:4]), deq[2:4])  # rows alone (an embedding's gather)

    model = _llama()
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    want = _engine_logits(model, ids, CompilerConfig(weight_dtype="int4"))
    updraft.quantize_weights(model, "int4", embeddings=False)
    got = _engine_logits(model, ids)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * want.abs().max().item())


# The share of the f32 bytes each form stores (with its scales): 1/4 + 4/K for int8, 1/8 + 1/64
# for int4 (one bf16 scale per 32 values; 0.1406, and the small Llama's two int8 down
# projections raise it to 0.143), 1/2 for bf16.
_STORED_SHARE = {"int8": 0.26, "int4": 0.145, "bf16": 0.51}
# Each form's weights in the report's engine vocabulary.
_ENGINE_DTYPE = {"int8": "i8", "int4": "i4", "bf16": "bf16"}


@pytest.mark.parametrize("dtype", ["int8", "int4", "bf16"])
def test_llama_engine_matches_eager_on_the_quantised_model(dtype):
    model = _llama()
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    f32_params = sum(p.numel() for p in model.parameters())
    summary = updraft.quantize_weights(model, dtype)
    # 2 layers x (q, o, gate, up, down) + lm_head + embed_tokens; k/v (64 x 256) are under 64K.
    assert len(summary.converted) == 12, summary
    assert "model.layers.0.self_attn.k_proj" in summary.skipped
    assert isinstance(model.lm_head, QuantizedLinear) and isinstance(model.model.embed_tokens, QuantizedEmbedding)
    assert summary.stored_bytes < _STORED_SHARE[dtype] * summary.f32_bytes
    assert sum(p.numel() for p in model.parameters()) < 0.1 * f32_params  # norms and small linears left
    with torch.no_grad():
        eager = model(ids, use_cache=False).logits
    got = _engine_logits(model, ids)
    # Same weights both sides; the engine applies the int8 scale to each row's dot product (the
    # int4 scales to each group's) instead of to every weight, and sums in another order: ~1e-6
    # relative per linear.
    torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-4 * eager.abs().max().item())
    rep = updraft.last_report()
    assert rep.num_fallback_compute == 0, str(rep)
    low = {}
    for p in rep.partitions:
        for dt, (count, _stored, _f32) in p.low_precision_weights.items():
            low[dt] = low.get(dt, 0) + count
    # Every converted linear on linear_wq; int4 stores the down projections (input 688, not a
    # multiple of 64) as int8, and the summary says so.
    assert low == ({"i4": 9, "i8": 2} if dtype == "int4" else {_ENGINE_DTYPE[dtype]: 11}), low
    assert summary.as_int8 == (["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"]
                               if dtype == "int4" else []), summary
    if dtype == "int4":
        assert "stored as int8, not int4 (int4 needs an input size that is a multiple of 64): " \
               "model.layers.0.mlp.down_proj, model.layers.1.mlp.down_proj" in str(summary), str(summary)
    assert rep.weights["folded_bytes"] < 1 << 20, rep.weights  # no f32 copy of a weight in the engine
    assert "the model's own" in str(rep) and "read low-precision in place" in str(rep), str(rep)
    # int4 under f32 activations: explain names the faster pair.
    assert ("activations: f32 over 9 int4 weight(s); activation_dtype=\"int8\" is the faster pair" in str(rep)) \
        == (dtype == "int4"), str(rep)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_f32_weights_are_released(dtype):
    model = _llama()
    old = [weakref.ref(model.lm_head.weight), weakref.ref(model.model.layers[0].mlp.up_proj.weight),
           weakref.ref(model.model.embed_tokens.weight)]
    updraft.quantize_weights(model, dtype)
    gc.collect()
    assert all(r() is None for r in old), "an f32 weight is still referenced after quantize_weights"


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_generate_tokens_equal_eager_dynamic_and_static_cache(dtype):
    """generate() on the quantised model: greedy tokens equal to eager's on the same model, with
    transformers' dynamic cache and with the static cache."""
    prompt = torch.randint(0, 32000, (1, 10), generator=torch.Generator().manual_seed(3))
    model = _llama()
    updraft.quantize_weights(model, dtype)
    for cache in (None, "static"):
        with torch.no_grad():
            want = model.generate(prompt, max_new_tokens=12, do_sample=False, cache_implementation=cache)
        torch._dynamo.reset()
        fwd = model.forward
        model.forward = torch.compile(fwd, backend="updraft")
        try:
            with torch.no_grad():
                got = model.generate(prompt, max_new_tokens=12, do_sample=False, cache_implementation=cache)
        finally:
            model.forward = fwd
        assert got.tolist() == want.tolist(), (cache, got, want)
        assert updraft.last_report().num_fallback_compute == 0


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_gpt2_tied_embedding_and_conv1d(dtype):
    """GPT-2: Conv1D stores its weight [in, out]; the token embedding is tied to lm_head, so the
    two are quantised once and share their buffers (the tie keeps one copy)."""
    model = _gpt2()
    assert model.lm_head.weight is model.transformer.wte.weight
    ids = torch.randint(0, 4000, (2, 12), generator=torch.Generator().manual_seed(4))
    summary = updraft.quantize_weights(model, dtype)
    assert {"lm_head", "transformer.wte", "transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj"} <= \
        set(summary.converted), summary
    assert model.lm_head.qweight is model.transformer.wte.qweight and model.lm_head.scale is model.transformer.wte.scale
    assert model.transformer.h[0].attn.c_attn.qweight.shape == (768, 256 if dtype == "int8" else 128)  # [out, in]
    with torch.no_grad():
        eager = model(ids, use_cache=False).logits
    got = _engine_logits(model, ids)
    torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-4 * eager.abs().max().item())
    assert updraft.last_report().num_fallback_compute == 0


def test_what_is_left_and_why():
    lin = torch.nn.Linear(512, 256)
    with pytest.raises(ValueError, match=r"\[updraft.quantize\] dtype 'f32' is not one of .*leave the model as it is"):
        updraft.quantize_weights(torch.nn.Sequential(lin), "f32")
    with pytest.raises(TypeError, match=r"\[updraft.quantize\] expected an nn.Module"):
        updraft.quantize_weights(lin.weight, "int8")
    s = updraft.quantize_weights(lin, "int8")
    assert s.converted == [] and "the model is the layer itself" in s.skipped["(the model)"]

    class Shared(torch.nn.Module):
        """A linear whose weight another module also reads (not as a layer this converts)."""

        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(512, 256)
            self.b = torch.nn.Linear(512, 256)
            self.b.weight = self.a.weight
            self.c = torch.nn.Linear(300, 300)
            self.d = torch.nn.Linear(8, 8)
            self.conv = torch.nn.Conv1d(512, 256, 1)
            self.conv.weight = torch.nn.Parameter(torch.randn(256, 512, 1))
            self.tied = torch.nn.Linear(512, 256)
            self.keep = torch.nn.Linear(512, 256)

        def forward(self, x):
            return self.a(x) + self.b(x) + self.tied(x) + self.keep(x)

    m = Shared()
    m.tied.weight = m.a.weight
    m.conv.weight = torch.nn.Parameter(m.keep.weight.detach().clone()[:, :, None])
    s = updraft.quantize_weights(m, "int8", skip=["keep"], min_elements=80_000)
    assert set(s.converted) == {"a", "b", "tied", "c"}, s  # a, b, tied share one weight: converted together
    assert m.a.qweight is m.b.qweight is m.tied.qweight
    assert s.skipped["keep"] == "skip" and "fewer than 80000" in s.skipped["d"]
    text = str(s)
    assert "4 layer(s)" in text and "left as they are (skip): keep" in text, text

    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(512, 256)
            self.conv = torch.nn.Conv1d(512, 256, 1)
            del self.conv.weight
            self.conv.weight = self.lin.weight  # the same parameter in a layer this does not convert

    o = Odd()
    s = updraft.quantize_weights(o, "int8")
    assert s.converted == [] and "which is not a layer this converts" in s.skipped["lin"], s
    assert isinstance(o.lin, torch.nn.Linear)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_state_dict_round_trip(dtype):
    """The quantised state_dict (qweight, scale) loads into another model quantised the same way."""
    a, b = _llama(1), _llama(1)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.01)
    updraft.quantize_weights(a, dtype)
    updraft.quantize_weights(b, dtype)
    sd = a.state_dict()
    assert sd["lm_head.qweight"].dtype == (torch.int8 if dtype == "int8" else torch.uint8) and "lm_head.weight" not in sd
    b.load_state_dict(sd)
    ids = torch.randint(0, 32000, (1, 6))
    with torch.no_grad():
        torch.testing.assert_close(b(ids).logits, a(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_model_file_holds_the_compact_weights(tmp_path, dtype):
    """updraft.export of a quantised model stores its int8 or int4 weights as they are (no f32
    copy appears on the way), and updraft.load runs them: the Python-free deployment path at a
    quarter (int8) or about a seventh (int4) of the bytes."""
    from updraft.zoo import MainOutput

    f32 = MainOutput(_llama(1), use_cache=False).eval()
    ids = torch.randint(0, 32000, (1, 8), generator=torch.Generator().manual_seed(5))
    updraft.export(f32, (ids,), tmp_path / "f32.updraft")
    q = MainOutput(_llama(1), use_cache=False).eval()
    updraft.quantize_weights(q, dtype)
    updraft.export(q, (ids,), tmp_path / "q.updraft")
    size_f32, size_q = (tmp_path / "f32.updraft").stat().st_size, (tmp_path / "q.updraft").stat().st_size
    assert size_q < (0.3 if dtype == "int8" else 0.2) * size_f32, (size_q, size_f32)
    m = updraft.load(str(tmp_path / "q.updraft"))
    with torch.no_grad():
        want = q(ids)
    got = m(ids)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_checkpoint_file_map_is_released(tmp_path):
    """from_pretrained maps the safetensors file, and its tensors are views of that one map: a
    norm's weight left in it would keep every converted weight's pages resident. quantize_weights
    copies what it leaves out of the map, so the file is unmapped once the model is converted."""
    from transformers import LlamaForCausalLM

    from updraft.quantize import _file_mapped_ranges

    _llama(1).save_pretrained(tmp_path / "ckpt")
    model = LlamaForCausalLM.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    ids = torch.randint(0, 32000, (1, 6))
    with torch.no_grad():
        want = model(ids).logits
    norm = model.model.norm.weight
    summary = updraft.quantize_weights(model, "int8")
    gc.collect()
    assert summary.copied_from_files > 0 and "copied out of the mapped checkpoint file" in str(summary)
    assert model.model.norm.weight is norm  # the same Parameter, now in memory of its own
    ranges = _file_mapped_ranges()
    assert ranges, "no file maps seen: /proc/self/maps unreadable?"
    left = [t for t in list(model.parameters()) + list(model.buffers())
            if any(lo <= t.untyped_storage().data_ptr() < hi for lo, hi in ranges)]
    assert not left, f"{len(left)} tensors still in a mapped file"
    with open("/proc/self/maps") as f:
        assert "model.safetensors" not in f.read(), "the checkpoint is still mapped"
    with torch.no_grad():
        got = model(ids).logits
    assert (got - want).abs().max() < 0.05 * want.abs().max()  # int8 weights now, close to f32


def test_graphs_over_compact_weights_run_untimed():
    """Eager runs a quantised model many times slower than the engine (int8 through
    aten._weight_int8pack_mm, bf16 widened to f32 at every call), so its graphs are not timed
    against eager: the engine runs every call, and the report says why."""
    for dtype in ("int8", "int4", "bf16"):
        model = _llama(1)
        updraft.quantize_weights(model, dtype)
        ids = torch.randint(0, 32000, (1, 8))
        torch._dynamo.reset()
        fast = torch.compile(model, backend="updraft")
        with torch.no_grad():
            fast(ids, use_cache=False)
        rep = updraft.last_report()
        text = "\n".join(why for g in rep.graphs for _, why in g.compiles)
        assert "not timed against eager PyTorch: the engine reads 6 of the model's own int8/int4/bf16 weights" in text, \
            (dtype, text)  # 1 layer: q, o, gate, up, down and lm_head (k, v under 64K; the embedding is gathered)
        matmul = {"int8": "_weight_int8pack_mm", "int4": "updraft.linear_int4"}.get(dtype)
        if matmul:
            assert any(matmul in op for g in rep.graphs for op in g.engine_ops), str(rep)


def test_int8pack_mm_outside_the_engines_dtypes_falls_back():
    """aten._weight_int8pack_mm and updraft.linear_int4 with bf16 activations: the engine's
    linear_wq is float32, so the op stays in PyTorch, named in the report, and the result is
    eager's."""
    q, s = quantize_rows_int8(torch.randn(96, 64))
    q4, s4 = quantize_rows_int4(torch.randn(96, 64))

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.aten._weight_int8pack_mm(x, q, s.to(x.dtype)) * 2

    class M4(torch.nn.Module):
        def forward(self, x):
            return torch.ops.updraft.linear_int4(x, q4, s4) * 2

    x = torch.randn(5, 64, dtype=torch.bfloat16)
    for m, op, why in ((M(), "_weight_int8pack_mm", "float32 x, int8 w and float32 scales"),
                       (M4(), "updraft.linear_int4", "float32 x, uint8 w and bfloat16 scales")):
        torch._dynamo.reset()
        got = torch.compile(m, backend="updraft")(x)
        torch.testing.assert_close(got, m(x), rtol=0, atol=0)
        rep = updraft.last_report()
        assert any(op in o and any(why in w for w in whys)
                   for g in rep.graphs for o, whys in g.reasons.items()), str(rep)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_gradients_flow_through_quantised_layers(dtype):
    """Training around a quantised model (its compact weights frozen: layers before it, biases,
    adapters): the gradient reaches everything before an int8 or int4 layer, compiled as in eager.
    aten._weight_int8pack_mm and updraft.linear_int4 have no derivative, so with autograd on the
    layer widens instead."""
    torch.manual_seed(0)
    # 320: an input size int4 stores as int4 (a multiple of 64).
    model = torch.nn.Sequential(torch.nn.Linear(32, 320), torch.nn.GELU(), torch.nn.Linear(320, 400),
                                torch.nn.ReLU(), torch.nn.Linear(400, 10))
    updraft.quantize_weights(model, dtype, min_elements=100_000)  # 320 x 400 only
    assert isinstance(model[2], QuantizedLinear) and model[2].bias.requires_grad
    x = torch.randn(6, 32)
    grads = {}
    for name, fn in (("eager", model), ("updraft", torch.compile(model, backend="updraft"))):
        torch._dynamo.reset()
        model.zero_grad()
        fn(x).square().mean().backward()
        grads[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert set(grads["eager"]) == {"0.weight", "0.bias", "2.bias", "4.weight", "4.bias"}
    for n, g in grads["eager"].items():
        torch.testing.assert_close(grads["updraft"][n], g, rtol=1e-4, atol=1e-5, msg=n)
    assert grads["eager"]["0.weight"].abs().sum() > 0


def test_compile_cache_hit_and_refit_with_other_int8_weights(tmp_path):
    """The int8 weights are parameters the compile cache stores by reference: a second compile
    hits, and another model of the same shape (other weights) hits too and computes with its own."""
    from updraft.cache import wait_for_writes

    ids = torch.randint(0, 32000, (1, 8), generator=torch.Generator().manual_seed(6))

    def run(model):
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model, backend="updraft", options={"cache_dir": str(tmp_path)})(ids, use_cache=False)
        wait_for_writes()
        return out.logits, updraft.last_report()

    a = _llama(1)
    updraft.quantize_weights(a, "int8")
    cold, rep = run(a)
    assert [p.cache for p in rep.partitions] == ["miss, stored"], str(rep)
    warm, rep = run(a)
    assert [p.cache for p in rep.partitions] == ["hit"], str(rep)
    assert torch.equal(warm, cold)
    torch.manual_seed(9)
    from transformers import LlamaForCausalLM

    b = LlamaForCausalLM(_llama_config(1)).eval()
    updraft.quantize_weights(b, "int8")
    other, rep = run(b)
    assert [p.cache for p in rep.partitions] == ["hit"], str(rep)
    with torch.no_grad():
        want = b(ids, use_cache=False).logits
    torch.testing.assert_close(other, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


def test_a_lone_int4_matmul_runs_in_the_engine():
    """A partition of one updraft.linear_int4 pays for its boundary: eager PyTorch would widen the
    whole weight to f32 at every call (the cost rule counts that), where the engine reads it as
    stored. Without the term the rule left it to PyTorch (one op: 6.5 us saved, 7.3 us of boundary)."""
    q, s = quantize_rows_int4(torch.randn(96, 64))

    class M(torch.nn.Module):
        def forward(self, x, i):  # the shift runs in PyTorch (no engine lowering): two partitions
            return torch.ops.updraft.linear_int4(x, q, s), i >> 1

    x, i = torch.randn(3, 64), torch.arange(6)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(M(), backend="updraft")(x, i)
    torch.testing.assert_close(got, M()(x, i), rtol=1e-5, atol=1e-5)
    rep = updraft.last_report()
    assert any("linear_int4" in op for g in rep.graphs for op in g.engine_ops), str(rep)


def test_weight_dtype_over_the_models_own_weights_says_which_are_whose():
    """A model holding int4 weights itself, lm_head left f32 (skip), compiled with
    weight_dtype="int8": the engine converts lm_head only, and `explain` counts both forms and
    says how many of the weights are the model's own."""
    model = _llama(1)
    updraft.quantize_weights(model, "int4", skip=["lm_head"])
    ids = torch.randint(0, 32000, (1, 8))
    torch._dynamo.reset()
    text = str(updraft.explain(model, ids, config=CompilerConfig(weight_dtype="int8"), use_cache=False))
    # q, o, gate, up (int4) and down (K = 688: int8) are the model's; lm_head is weight_dtype's.
    assert "weight_dtype int8: 6 linear weight(s) stored low-precision (4 int4, 2 int8), " \
           "5 of them the model's own (updraft.quantize_weights)" in text, text
