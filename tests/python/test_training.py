"""Training through the engine: AOTAutograd's forward and backward graphs compiled with updraft,
compared with eager PyTorch from the same weights and inputs (docs/training.md).

Tolerances (f32). The loss: rtol 1e-5, one rounding chain. A gradient: its largest error at
most 1e-4 of its largest magnitude (plus 1e-6 for gradients that are zero in exact arithmetic,
such as a conv bias before batch norm): the engine's GEMMs (oneDNN) block and order their
f32 sums differently from eager's (MKL), and a weight gradient sums over every token of the
batch (K up to a few thousand here), so single-rounding agreement is not expected. Multi-step
runs compare after every step: the differences above compound through AdamW's updates, so
the curves are compared with a looser bound, stated where it is used.
"""
from __future__ import annotations

import collections
import copy
import re
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import updraft
from updraft import CompilerConfig, get_backend

GRAD_RTOL = 1e-4
GRAD_ATOL = 1e-6


def assert_grads_match(model: torch.nn.Module, ref: torch.nn.Module) -> None:
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if q.grad is None:
            assert p.grad is None, f"{name}: eager computes no gradient, the compiled step does"
            continue
        assert p.grad is not None, f"{name}: no gradient from the compiled step"
        scale = q.grad.abs().max().item()
        err = (p.grad - q.grad).abs().max().item()
        assert err <= GRAD_RTOL * scale + GRAD_ATOL, f"{name}: max error {err:.3g} against scale {scale:.3g}"


def assert_buffers_match(model: torch.nn.Module, ref: torch.nn.Module) -> None:
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=lambda m: f"buffer {name}: {m}")


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.LayerNorm(64), torch.nn.Linear(64, 64), torch.nn.SiLU(), torch.nn.Linear(64, 10))


def _finetune_module():
    """benchmarks/finetune.py: its tasks (the slow fine-tune test) and its ConvNet."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "finetune.py"
    if "finetune_benchmark" in sys.modules:
        return sys.modules["finetune_benchmark"]
    spec = importlib.util.spec_from_file_location("finetune_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo looks a module's classes up by module name
    spec.loader.exec_module(module)
    return module


def _convnet():
    """Conv + train-mode batch norm + ReLU, max pool, a residual block, global pool, linear."""
    return _finetune_module().ConvNet(in_channels=3, classes=10)


def _classify_step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def _hf_step(model, inputs):
    out = model(**inputs)
    out.loss.backward()
    return out.loss


def _bert():
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     vocab_size=500, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=3)
    model = BertForSequenceClassification(cfg)
    inputs = dict(input_ids=torch.randint(0, 500, (4, 24)), attention_mask=torch.ones(4, 24, dtype=torch.long),
                  labels=torch.randint(0, 3, (4,)))
    inputs["attention_mask"][1, 20:] = 0  # a padded row: the mask takes part in the gradient
    return model, inputs


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 500, (2, 24))
    return model, dict(input_ids=ids, labels=ids)


def _vit():
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    image_size=32, patch_size=8, num_labels=5, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    model = ViTForImageClassification(cfg)
    return model, dict(pixel_values=torch.randn(2, 3, 32, 32), labels=torch.randint(0, 5, (2,)))


ENGINE = CompilerConfig(training="engine")  # the engine, whatever the timing (coverage is asserted)


def _compiled_step(step):
    return torch.compile(step, backend=get_backend(ENGINE))


def _coverage(rep) -> dict:
    return {kind: eng / max(eng + fb, 1) for kind, (eng, fb) in rep.compute_by_kind().items()}


def _assert_classify_step_in_the_engine(model, x, y):
    """One compiled classification step against eager from a copy of `model`: the loss, every
    gradient, and every compute op of both graphs in the engine. Returns the step's report."""
    ref = copy.deepcopy(model)
    loss = _compiled_step(_classify_step)(model, x, y)
    rep = updraft.last_report()
    torch.testing.assert_close(loss, _classify_step(ref, x, y), rtol=1e-5, atol=0)
    assert_grads_match(model, ref)
    assert _coverage(rep) == {"training forward": 1.0, "training backward": 1.0}, str(rep)
    return rep


def test_mlp_one_step_matches_eager_and_runs_in_the_engine():
    _assert_classify_step_in_the_engine(_mlp(), torch.randn(16, 32), torch.randint(0, 10, (16,)))


@pytest.mark.parametrize("build", [_bert, _gpt2, _vit], ids=["bert", "gpt2", "vit"])
def test_transformer_one_step_matches_eager(build):
    model, inputs = build()
    model.train()
    ref = copy.deepcopy(model)
    compiled = torch.compile(_hf_step, backend=get_backend(ENGINE))
    from updraft.report import set_collector, Report

    rep = Report()
    set_collector(rep)
    try:
        loss = compiled(model, inputs)
    finally:
        set_collector(None)
    want = _hf_step(ref, inputs)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=0)
    assert_grads_match(model, ref)
    # Attention (decomposed for training) and its gradient run in the engine: at least 95% of
    # the compute ops of each kind, over every graph of the step (GPT-2's loss is a graph of
    # its own).
    cov = _coverage(rep)
    assert set(cov) == {"training forward", "training backward"}, str(rep)
    assert min(cov.values()) >= 0.95, str(rep)


def test_convnet_train_mode_batch_norm_matches_eager_with_running_stats():
    model = _convnet().train()
    ref = copy.deepcopy(model)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    step = _compiled_step(_classify_step)
    for _ in range(2):  # the running statistics move twice; both updates are written back
        model.zero_grad()
        ref.zero_grad()
        loss = step(model, x, y)
        want = _classify_step(ref, x, y)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=0)
        assert_grads_match(model, ref)
        assert_buffers_match(model, ref)
    assert model.stem[1].num_batches_tracked.item() == 2
    # Batch norm (batch_norm_train / _backward), the max pool with its indices and every
    # convolution gradient run in the engine.
    assert _coverage(updraft.last_report()) == {"training forward": 1.0, "training backward": 1.0}, \
        str(updraft.last_report())


class _PoolNet(torch.nn.Module):
    """conv -> act -> pool(**pool) -> global mean -> linear: a pool between trainable layers."""

    def __init__(self, pool_fn, act, pool: dict) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)
        self.pool_fn, self.act, self.pool = pool_fn, act, pool

    def forward(self, x):
        return self.head(self.pool_fn(self.act(self.conv(x)), **self.pool).mean((2, 3)))


def _assert_pool_step_matches_eager(model, x_shape) -> None:
    """One step against eager: loss, parameter and input gradients, all of it in the engine."""
    ref = copy.deepcopy(model)
    x, y = torch.randn(*x_shape, requires_grad=True), torch.randint(0, 5, (x_shape[0],))
    xr = x.detach().clone().requires_grad_(True)
    loss = _compiled_step(_classify_step)(model, x, y)
    want = _classify_step(ref, xr, y)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=0)
    assert_grads_match(model, ref)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-6)
    assert _coverage(updraft.last_report()) == {"training forward": 1.0, "training backward": 1.0}, \
        str(updraft.last_report())


@pytest.mark.parametrize("pool", [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
                                  dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=3, dilation=2)],
                         ids=["overlapping-padded", "tiling", "ceil", "dilated"])
def test_max_pool_gradient_matches_eager_with_ties(pool):
    """After a ReLU most windows hold several zeros: the gradient goes to the first of the tied
    maxima, as eager's indices say; overlapping windows add their gradients."""
    torch.manual_seed(0)
    model = _PoolNet(F.max_pool2d, F.relu, pool)
    model.conv.bias.data.fill_(-0.5)  # many exact zeros after the ReLU
    _assert_pool_step_matches_eager(model, (2, 3, 11, 11))


class _Convs(torch.nn.Module):
    """Convolutions whose gradients the engine computes: a strided conv over an odd image (the
    input size is not implied by dy), a dilated one, a grouped one and a depthwise one, a 1x1
    without bias, and conv1d."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dilated = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.grouped = torch.nn.Conv2d(8, 16, 3, padding=1, groups=4)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.project = torch.nn.Conv2d(16, 8, 1, bias=False)
        self.seq = torch.nn.Conv1d(8, 6, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(6, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.dilated(x)) + x
        x = F.gelu(self.depthwise(F.relu(self.grouped(x))))
        x = self.project(x)
        x = self.seq(x.flatten(2))
        return self.head(x.mean(-1))


@pytest.mark.parametrize("frozen", [(), ("stem",), ("dilated", "seq")], ids=["all", "frozen-stem", "frozen-middle"])
def test_convolution_gradients_run_in_the_engine(frozen):
    """Every convolution's gradient runs in the engine (conv2d_backward_data/_weight and a sum
    for the bias): the backward graph is one partition with no op left to PyTorch. A frozen
    conv asks for no weight gradient (and the first conv for no input gradient): AOTAutograd's
    output mask, which the lowering follows."""
    torch.manual_seed(0)
    model = _Convs().train()
    for name in frozen:
        getattr(model, name).requires_grad_(False)
    rep = _assert_classify_step_in_the_engine(model, torch.randn(4, 3, 15, 15), torch.randint(0, 10, (4,)))
    backward = [g for g in rep.graphs if g.kind == "training backward"]
    ops = collections.Counter()
    for g in backward:
        ops.update(g.engine_ops)
    assert ops["aten.convolution_backward.default"] == 6 - ("stem" in frozen), str(rep)
    assert sum(len(g.partitions) for g in backward) == 1, str(rep)


class _Decoder(torch.nn.Module):
    """Layers of decoders and audio models: transposed convolutions (2-d with output padding
    and groups, 1-d with bias), group norm, instance norm and an adaptive max pool whose
    indices the gradient reads."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.up = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.inorm = torch.nn.InstanceNorm2d(6, affine=True)
        self.up1d = torch.nn.ConvTranspose1d(6, 4, 4, stride=2, padding=1)
        self.head = torch.nn.Linear(4, 10)

    def forward(self, x):
        x = F.silu(self.gn(self.down(x)))
        x = F.leaky_relu(self.inorm(self.up(x)), 0.1)  # back to the input's size
        x = F.adaptive_max_pool2d(x, (1, None)).squeeze(2)  # [N, 6, W]: max over H
        x = torch.tanh(self.up1d(x))
        return self.head(F.adaptive_max_pool1d(x, 1).squeeze(-1))


def test_decoder_layers_run_in_the_engine():
    """Transposed convolutions (the data gradient of the convolution they transpose; their
    gradients a convolution and a weight gradient), group norm and instance norm with the
    statistics they save, and adaptive max pooling with indices: loss, gradients and
    coverage."""
    torch.manual_seed(0)
    rep = _assert_classify_step_in_the_engine(_Decoder().train(), torch.randn(4, 3, 12, 10),
                                              torch.randint(0, 10, (4,)))
    assert sum(len(g.partitions) for g in rep.graphs) == 2, str(rep)


@pytest.mark.parametrize("pool", [dict(kernel_size=2), dict(kernel_size=16, ceil_mode=True),
                                  dict(kernel_size=2, divisor_override=3)], ids=["tiles", "whole", "divisor"])
def test_avg_pool_gradient_in_the_engine(pool):
    """Average pools whose windows tile the input, or one window over all of it (EfficientNet's
    final pool), have their gradient in the engine."""
    torch.manual_seed(0)
    _assert_pool_step_matches_eager(_PoolNet(F.avg_pool2d, torch.tanh, pool), (2, 3, 8, 6))


def test_adamw_steps_follow_eager():
    model = _mlp()
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    step = _compiled_step(_classify_step)
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    losses = []
    for i in range(20):
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = step(model, x, y)
        opt.step()
        want = _classify_step(ref, x, y)
        ref_opt.step()
        # AdamW divides by sqrt(v): early on it maps a gradient difference of 1e-7 to an update
        # difference of lr-scale, so the runs drift apart slowly; 20 steps stay within 1e-3.
        torch.testing.assert_close(loss, want, rtol=1e-3, atol=1e-5, msg=lambda m: f"step {i}: {m}")
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses  # it learns
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("training", ["engine", "auto"])
def test_gradient_accumulation_over_two_forwards(training):
    # Two forwards before one backward: the first forward's saved activations must survive the
    # second (engine outputs are fresh tensors per call). Under "auto" the first calls alternate
    # between the engine and PyTorch, so one backward reads what the other side saved.
    model = _mlp()
    ref = copy.deepcopy(model)
    fwd = torch.compile(model, backend=get_backend(CompilerConfig(training=training)))
    a, b = torch.randn(8, 32), torch.randn(8, 32)
    (fwd(a).square().mean() + 3 * fwd(b).abs().mean()).backward()
    (ref(a).square().mean() + 3 * ref(b).abs().mean()).backward()
    assert_grads_match(model, ref)
    # And accumulation into .grad over steps.
    fwd(a).sum().backward()
    ref(a).sum().backward()
    assert_grads_match(model, ref)


def test_frozen_layers_get_no_gradient():
    model = _mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    ref = copy.deepcopy(model)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    _compiled_step(_classify_step)(model, x, y)
    _classify_step(ref, x, y)
    assert model[0].weight.grad is None and model[0].bias.grad is None
    assert_grads_match(model, ref)


def test_activation_checkpointing_matches_eager():
    from torch.utils.checkpoint import checkpoint

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
            self.b = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.b(checkpoint(self.a, x, use_reentrant=False))

    model = Net()
    ref = copy.deepcopy(model)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    loss = _compiled_step(_classify_step)(model, x, y)
    torch.testing.assert_close(loss, _classify_step(ref, x, y), rtol=1e-5, atol=0)
    assert_grads_match(model, ref)


def test_bf16_autocast_step_matches_eager():
    """Under bf16 autocast the CPU's native_layer_norm returns float32 mean and rstd for a bf16
    input where its meta function says bfloat16, and the backward reads them: an engine
    partition lowered from the traced dtypes read their bytes as bf16 (gradients of 1e34 and
    inf before engine_partition.check_traced_dtypes sent it to PyTorch). Tolerance: bf16's
    rounding (2^-8 relative) over a few ops, and the layer norm's gradient decomposed in f32
    against eager's bf16 kernel (1.5e-3 relative measured)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 5))
    ref = copy.deepcopy(model)
    x, y = torch.randn(8, 16), torch.randint(0, 5, (8,))
    step = _compiled_step(_classify_step)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = step(model, x, y)
        want = _classify_step(ref, x, y)
    torch.testing.assert_close(loss.float(), want.float(), rtol=1e-2, atol=0)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        scale = q.grad.abs().max().item()
        err = (p.grad - q.grad).abs().max().item()
        assert err <= 2e-2 * scale, f"{name}: max error {err:.3g} against scale {scale:.3g}"


def test_dropout_keeps_its_rate_and_gradient_mask():
    # The default backend (training="auto"): whichever side runs the step, the kept fraction is
    # 1-p and the gradient is zero exactly where the output was dropped.
    drop = torch.nn.Dropout(0.3).train()
    x = torch.randn(200, 100, requires_grad=True)
    out = torch.compile(drop, backend="updraft")(x)
    out.sum().backward()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.02
    torch.testing.assert_close(out[kept], x.detach()[kept] / 0.7)
    torch.testing.assert_close(x.grad, kept.float() / 0.7)


class _TwoDropouts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 64), torch.nn.Linear(64, 16)
        self.d1, self.d2 = torch.nn.Dropout(0.3), torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.d2(self.b(self.d1(torch.relu(self.a(x)))))


def _dropout_reference(model, x, seed_state):
    """The step with the engine's masks (updraft.random_ops.keep_mask) under the seed the compiled
    call draws after torch.manual_seed(seed_state): one i64 from torch's generator."""
    from updraft.random_ops import keep_mask

    torch.manual_seed(seed_state)
    seed = int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64))
    h = torch.relu(model.a(x))
    h = h * keep_mask(h.shape, 0.3, seed, 0) * (1 / 0.7)
    y = model.b(h)
    return y * keep_mask(y.shape, 0.5, seed, 1) * 2.0


def _lowering_for(side, monkeypatch, op):
    """side "pytorch": `op` loses its engine lowering for the test, so it falls back and draws
    the engine's bits through the bindings; side "engine": as it is."""
    from updraft import lowering

    if side == "pytorch":
        monkeypatch.delitem(lowering.LOWERINGS, op)


def _assert_draws_ran(side, rep, op, count):
    """The step's `count` draws of `op` ran in the engine with the training forward in one
    partition (side "engine"), or in PyTorch (side "pytorch")."""
    if side == "engine":
        forward = next(g for g in rep.graphs if g.kind == "training forward")
        assert forward.fallback_compute == 0, str(rep)
        assert len(forward.partitions) == 1, str(rep)
        assert rep.engine_ops[str(op)] == count, str(rep)
    else:
        assert rep.fallback_ops[str(op)] == count, str(rep)


@pytest.mark.parametrize("side", ["engine", "pytorch"])
def test_dropout_draws_the_engines_masks_repeatably(side, monkeypatch):
    # Dropout runs in the engine (bernoulli from a counter-based generator, seeded from torch's
    # generator once per call): the forward stays one partition. Where it falls back to PyTorch
    # (side="pytorch": no lowering), the op draws the same bits, so both sides give the same
    # output. torch.manual_seed repeats a call's masks; the next call gets new ones.
    from updraft import random_ops

    _lowering_for(side, monkeypatch, random_ops.DROPOUT)
    torch.manual_seed(0)
    model = _TwoDropouts().train()
    ref = copy.deepcopy(model)
    x = torch.randn(64, 32)
    fast = torch.compile(model, backend=get_backend(ENGINE))
    torch.manual_seed(11)
    y = fast(x)
    y.square().sum().backward()
    want = _dropout_reference(ref, x, 11)
    want.square().sum().backward()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    assert_grads_match(model, ref)
    _assert_draws_ran(side, updraft.last_report(), random_ops.DROPOUT, 2)
    with torch.no_grad():
        torch.manual_seed(3)
        first = fast(x)
        torch.manual_seed(3)
        again, other = fast(x), fast(x)
    assert torch.equal(first, again)
    assert not torch.equal(again, other)


class _StochasticDepth(torch.nn.Module):
    """A residual branch dropped per sample, as torchvision's StochasticDepth(p, "row") does it."""

    def __init__(self, p):
        super().__init__()
        self.p, self.f = p, torch.nn.Linear(16, 16)

    def forward(self, x):
        keep = 1.0 - self.p
        noise = torch.empty([x.shape[0], 1], dtype=x.dtype).bernoulli_(keep).div_(keep)
        return x + self.f(x) * noise


def _seeded_engine_step(model, x, seed):
    """model(x) compiled for the engine after torch.manual_seed(seed), its sum backpropagated:
    (the output, the report, a copy of the model from before the step, and the seed the call's
    random ops drew from: updraft.seed's one draw from torch's generator)."""
    ref = copy.deepcopy(model)
    torch.manual_seed(seed)
    y = torch.compile(model, backend=get_backend(ENGINE))(x)
    y.sum().backward()
    rep = updraft.last_report()
    torch.manual_seed(seed)
    return y, rep, ref, int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64))


def test_stochastic_depth_draws_in_the_engine():
    # bernoulli_(p) on a fresh tensor (functionalised: aten.bernoulli.p) takes the engine's bits
    # like dropout: the step equals a reference built from those bits, in one partition.
    from updraft.random_ops import draw_mask

    torch.manual_seed(0)
    model = _StochasticDepth(0.4).train()
    x = torch.randn(256, 16)
    y, rep, ref, seed = _seeded_engine_step(model, x, 21)
    assert rep.engine_ops["updraft.bernoulli.default"] == 1, str(rep)
    forward = next(g for g in rep.graphs if g.kind == "training forward")
    assert forward.fallback_compute == 0 and len(forward.partitions) == 1, str(rep)
    noise = draw_mask([256, 1], 0.6, seed, 0).float() / 0.6
    want = x + ref.f(x) * noise
    want.sum().backward()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    assert_grads_match(model, ref)
    assert 0.4 < (noise > 0).float().mean().item() < 0.8  # 256 draws of p = 0.6: 7 sigma either side


class _DropPath(torch.nn.Module):
    """transformers' drop path (Swin, BEiT, ConvNeXt): floor(keep + rand) per sample, and a
    rand_like noise added to the input."""

    def __init__(self, p):
        super().__init__()
        self.p, self.f = p, torch.nn.Linear(16, 16)

    def forward(self, x):
        x = x + 0.01 * torch.rand_like(x)
        keep = 1.0 - self.p
        flags = (keep + torch.rand((x.shape[0], 1), dtype=x.dtype)).floor_()
        return x + self.f(x).div(keep) * flags


@pytest.mark.parametrize("side", ["engine", "pytorch"])
def test_drop_path_draws_uniforms_in_the_engine(side, monkeypatch):
    # aten.rand / rand_like become updraft.rand: the engine's uniform (Philox bits, top 24 of
    # 32), one stream each in graph order; where it falls back (side="pytorch") the op draws the
    # same bits through the bindings. The step equals a reference built from those bits.
    from updraft import random_ops

    _lowering_for(side, monkeypatch, random_ops.RAND)
    torch.manual_seed(0)
    model = _DropPath(0.3).train()
    x = torch.randn(512, 16)
    y, rep, ref, seed = _seeded_engine_step(model, x, 8)
    _assert_draws_ran(side, rep, random_ops.RAND, 2)
    noise, u = random_ops.draw_uniform([512, 16], seed, 0), random_ops.draw_uniform([512, 1], seed, 1)
    xn = x + 0.01 * noise
    flags = (0.7 + u).floor()
    want = xn + ref.f(xn).div(0.7) * flags
    want.sum().backward()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    assert_grads_match(model, ref)
    assert 0.0 <= noise.min().item() and noise.max().item() < 1.0
    assert abs(noise.mean().item() - 0.5) < 0.02  # 8192 uniforms: 7 sigma
    assert 0.6 < flags.mean().item() < 0.8  # 512 draws of p = 0.7: 5 sigma either side


class _Reparameterise(torch.nn.Module):
    """A VAE's encoder head and sample: mu + randn_like(mu) * exp(logvar / 2)."""

    def __init__(self):
        super().__init__()
        self.enc, self.dec = torch.nn.Linear(16, 32), torch.nn.Linear(16, 16)

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        return self.dec(mu + torch.randn_like(mu) * torch.exp(0.5 * logvar))


@pytest.mark.parametrize("side", ["engine", "pytorch"])
def test_reparameterisation_draws_normals_in_the_engine(side, monkeypatch):
    # aten.randn_like becomes updraft.randn: the engine's normal (Box-Muller of two Philox
    # uniforms); where it falls back the op draws the same bits through the bindings. The step
    # equals a reference built from those bits, and the forward stays one partition.
    from updraft import random_ops

    _lowering_for(side, monkeypatch, random_ops.RANDN)
    torch.manual_seed(0)
    model = _Reparameterise().train()
    x = torch.randn(1024, 16)
    y, rep, ref, seed = _seeded_engine_step(model, x, 5)
    _assert_draws_ran(side, rep, random_ops.RANDN, 1)
    eps = random_ops.draw_normal([1024, 16], seed, 0)
    mu, logvar = ref.enc(x).chunk(2, dim=-1)
    want = ref.dec(mu + eps * torch.exp(0.5 * logvar))
    want.sum().backward()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    assert_grads_match(model, ref)
    assert abs(eps.mean().item()) < 0.04 and abs(eps.std().item() - 1) < 0.04  # 16384 normals: 5 sigma


def test_embedding_gradient_scatters_into_a_broadcast_zero():
    # embedding_dense_backward is index_put(full(table size, 0), ids, grad, accumulate): the
    # scatter broadcasts the zero itself, so the engine holds no constant of the table's size
    # (before: a 2.6 MB literal here, 94 MB for BERT-base's vocabulary) and the gradient matches.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(20000, 32), torch.nn.Linear(32, 8))
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 20000, (4, 50))
    ids[0, :5] = 7  # repeated ids sum their rows
    y = torch.compile(model, backend=get_backend(ENGINE))(ids)
    y.square().sum().backward()
    ref(ids).square().sum().backward()
    assert_grads_match(model, ref)
    rep = updraft.last_report()
    backward = next(g for g in rep.graphs if g.kind == "training backward")
    assert backward.fallback_compute == 0, str(rep)
    assert rep.weights["literal_bytes"] < 64 * 1024, rep.weights


def test_dropout_rate_and_scale_in_the_engine():
    # p > 0 cannot be compared with eager's masks: the kept fraction is within 5 sigma of 1 - p,
    # each element kept is x / (1 - p), and the gradient is the mask / (1 - p).
    for p in (0.1, 0.5, 0.9):
        x = torch.randn(512, 256, requires_grad=True)
        out = torch.compile(torch.nn.Dropout(p).train(), backend=get_backend(ENGINE))(x)
        out.sum().backward()
        assert updraft.last_report().engine_ops["updraft.dropout.default"] == 1
        kept = out != 0
        n = kept.numel()
        assert abs(kept.sum().item() - n * (1 - p)) <= 5 * (n * p * (1 - p)) ** 0.5, p
        torch.testing.assert_close(out[kept], x.detach()[kept] * (1 / (1 - p)), rtol=1e-6, atol=0)
        torch.testing.assert_close(x.grad, kept.float() * (1 / (1 - p)), rtol=1e-6, atol=0)


def _saved_by_forward(rep) -> tuple[int, float]:
    """(tensors, MB) of the forward's report line on what it keeps for the backward."""
    [line] = [t for g in rep.graphs if g.kind == "training forward" for k, t in g.compiles
              if k == "saved activations"]
    m = re.search(r"keeps (\d+) tensors for the backward, ([\d.]+) MB", line)
    return int(m.group(1)), float(m.group(2))


def _step_saving(model: torch.nn.Module, x: torch.Tensor, **knobs) -> tuple[int, float, str]:
    """One training step of `model` (loss: the output's sum) through the engine with these
    CompilerConfig knobs, its gradients checked against eager's and every op in the engine:
    (tensors, MB) the forward keeps for its backward, and the report."""
    ref = copy.deepcopy(model)
    step = torch.compile(lambda m, x: m(x).sum(), backend=get_backend(CompilerConfig(training="engine", **knobs)))
    step(model, x).backward()
    rep = updraft.last_report()
    ref(x).sum().backward()
    assert_grads_match(model, ref)
    assert _coverage(rep) == {"training forward": 1.0, "training backward": 1.0}, str(rep)
    return (*_saved_by_forward(rep), str(rep))


@pytest.mark.parametrize("recompute", [True, False])
def test_pointwise_values_a_backward_matmul_reads_are_recomputed(recompute):
    """A transformer MLP's GELU output is read by the second linear's weight gradient. With
    CompilerConfig.recompute_pointwise (default) the forward keeps the first linear's output
    alone and the backward recomputes GELU from it; torch's rule (False) keeps both. The
    gradients match eager either way, and the report says what the forward keeps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    tensors, mb, rep = _step_saving(model, torch.randn(512, 64), recompute_pointwise=recompute)
    hidden_mb = 512 * 256 * 4 / 2**20  # one [512, 256] f32 activation: 0.5 MB
    # Saved either way: x, the first linear's output; with torch's rule also GELU's output.
    assert (tensors, mb) == ((1, hidden_mb) if recompute else (2, 2 * hidden_mb)), rep
    assert ("recompute_pointwise" in rep) == recompute, rep
    with pytest.raises(TypeError, match="recompute_pointwise must be a bool"):
        CompilerConfig(recompute_pointwise="yes")


@pytest.mark.parametrize("recompute", [True, False])
def test_layer_norm_outputs_are_recomputed_from_their_input(recompute):
    """A layer norm's input is saved for its own backward and its output for the next linear's
    weight gradient. With CompilerConfig.recompute_norms (default) the forward keeps the input
    alone and the backward recomputes the norm (output, mean, rstd) from it; False keeps the
    output, mean and rstd too. The gradients match eager either way."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 32))
    tensors, mb, rep = _step_saving(model, torch.randn(2048, 64), recompute_norms=recompute)
    act_mb, stat_mb = 2048 * 64 * 4 / 2**20, 2048 * 4 / 2**20  # a [2048, 64] activation; a [2048, 1] statistic
    saved = (1, act_mb) if recompute else (4, 2 * act_mb + 2 * stat_mb)
    assert (tensors, mb) == (saved[0], pytest.approx(saved[1], abs=0.05)), rep
    assert ("recompute_norms" in rep) == recompute, rep
    with pytest.raises(TypeError, match="recompute_norms must be a bool"):
        CompilerConfig(recompute_norms=1)


def test_a_recompute_rule_this_torch_cannot_apply_is_not_reported(monkeypatch):
    """A rule whose change this torch cannot make (the norms rule on a torch without the
    partitioner's op-list function; the change returns None) is left out: the partition takes
    torch's rule for layer norms, and the report line does not claim it."""
    from updraft import backend
    monkeypatch.setattr(backend, "RECOMPUTE_RULES", tuple(
        (knob, (lambda partitioners: None) if knob == "recompute_norms" else change, said)
        for knob, change, said in backend.RECOMPUTE_RULES))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 32))
    tensors, _, rep = _step_saving(model, torch.randn(256, 64))
    assert tensors == 4, rep  # torch's rule: the norm's input, output, mean and rstd
    assert "recompute_norms" not in rep and "recompute_pointwise" in rep, rep


class _Attention(torch.nn.Module):
    """Self-attention as transformers write it: one qkv linear, heads by view and permute, the
    result transposed back and reshaped for the output projection."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("recompute", [True, False])
def test_views_of_saved_values_are_recomputed_not_saved(recompute):
    """Attention's result is saved for its own backward and, reshaped, for the output
    projection's weight gradient; eager keeps one storage for both, the engine a tensor per
    forward output. With CompilerConfig.recompute_views (default) the backward recomputes the
    reshape, so the forward keeps one copy fewer; q, k and v are kept as the qkv linear's output
    once rather than as three views. The gradients match eager either way."""
    torch.manual_seed(0)
    tensors, mb, rep = _step_saving(_Attention(), torch.randn(8, 256, 64), recompute_views=recompute)
    act_mb, lse_mb = 8 * 256 * 64 * 4 / 2**20, 8 * 4 * 256 * 4 / 2**20  # [8, 256, 64] f32; [8, 4, 256] f32
    # The qkv output (3 activations' worth), attention's result and its log-sum-exp. With
    # torch's rule: q, k, v as three views, the result a second time reshaped, and x reshaped for
    # the qkv weight gradient (a view of an input, where recomputing it saves the input alone).
    saved = (3, 4 * act_mb + lse_mb) if recompute else (7, 6 * act_mb + lse_mb)
    assert (tensors, mb) == (saved[0], pytest.approx(saved[1], abs=0.05)), rep
    assert ("recompute_views" in rep) == recompute, rep


def test_explain_train_reports_forward_and_backward_apart():
    model = _mlp()
    rep = updraft.explain(model, torch.randn(4, 32), config=ENGINE, train=True)
    kinds = rep.compute_by_kind()
    assert set(kinds) == {"training forward", "training backward"}, str(rep)
    assert "by graph kind: training forward" in str(rep)
    assert all(p.grad is not None for p in model.parameters())  # explain ran the backward


def test_a_compile_failure_runs_the_step_in_pytorch(monkeypatch):
    from updraft import backend

    def boom(*args, **kwargs):
        raise RuntimeError("injected lowering failure")

    monkeypatch.setattr(backend, "partition_graph", boom)
    model = _mlp()
    ref = copy.deepcopy(model)
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    with pytest.warns(RuntimeWarning, match="compiling a training forward graph failed"):
        loss = _compiled_step(_classify_step)(model, x, y)
    torch.testing.assert_close(loss, _classify_step(ref, x, y), rtol=1e-5, atol=0)
    assert_grads_match(model, ref)
    rep = updraft.last_report()
    assert all(g.engine_compute == 0 and "injected lowering failure" in g.note for g in rep.graphs), str(rep)


@pytest.mark.parametrize("form", ["flash", "math"])
@pytest.mark.parametrize("mask", ["bool", "additive", "causal", "none", "row", "gqa"])
def test_attention_gradients_match_eager(mask, form):
    # Without dropout, training graphs keep torch's CPU flash op: the engine's sdpa returns each
    # row's log-sum-exp too, and the flash backward recomputes the weights from it, so no tensor
    # of the scores' size [B, H, L, S] is saved between forward and backward (L = S = 6 here,
    # E = 8). With dropout they run torch's math form (updraft/training.py, _attention_as_math),
    # called here with p = 0 so that eager is comparable: a boolean mask must become the
    # additive one first (read as 0/1 it gave outputs off by 0.3 and gradients off by 30), and
    # its softmax is torch's _safe_softmax, one engine softmax (zero_masked_rows). A query row
    # with every key masked ("row") gives 0s and no gradient in both forms, as eager's does, not
    # NaN. Tolerances: f32 dot products over E = 8 and S = 6 in another order than torch's, and
    # the recomputed weights (exp of a difference with the log-sum-exp) within a few ulps.
    from updraft.training import _attention_as_math

    B, H, L, E = 2, 4, 6, 8
    q, k, v = (torch.randn(B, H, L, E) for _ in range(3))
    attn_mask, causal, gqa = None, mask == "causal", mask == "gqa"
    if mask == "bool":
        attn_mask = torch.ones(B, 1, L, L, dtype=torch.bool)
        attn_mask[1, ..., 4:] = False
    elif mask == "row":
        attn_mask = torch.ones(B, 1, L, L, dtype=torch.bool)
        attn_mask[1, :, 2] = False
    elif mask == "additive":
        attn_mask = torch.zeros(B, 1, L, L)
        attn_mask[1, ..., 4:] = torch.finfo(torch.float32).min
    elif gqa:  # two key/value heads, each read by two query heads
        k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    attention = F.scaled_dot_product_attention if form == "flash" else _attention_as_math

    def f(q, k, v):
        return attention(q, k, v, attn_mask=attn_mask, is_causal=causal, enable_gqa=gqa)

    weight = torch.randn(B, H, L, E)
    got_in = [t.clone().requires_grad_() for t in (q, k, v)]
    want_in = [t.clone().requires_grad_() for t in (q, k, v)]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        got = torch.compile(f, backend="updraft")(*got_in)
    (got * weight).sum().backward()
    want = F.scaled_dot_product_attention(*want_in, attn_mask=attn_mask, is_causal=causal, enable_gqa=gqa)
    (want * weight).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_in, want_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    rep = updraft.last_report()
    assert _coverage(rep)["training backward"] == 1.0, str(rep)
    ops = rep.engine_ops
    if form == "flash":
        assert ops["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 1, ops
        assert ops["aten._scaled_dot_product_flash_attention_for_cpu_backward.default"] == 1, ops
        assert (B, H, L, L) not in saved and (B, H, L) in saved, saved  # the log-sum-exp, not the weights
    else:
        assert ops["aten._safe_softmax.default"] == 1 and "aten.any.dim" not in ops and "aten.eq.Scalar" not in ops, ops
        assert (B, H, L, L) in saved, saved


@pytest.mark.parametrize("mask", ["causal", "additive"])
def test_attention_gradients_match_eager_float64(mask):
    # The flash form in float64: the engine's f64 sdpa with its log-sum-exp, and the backward's
    # matmuls with transposed operands on the f64 GEMM (which read them swapped; it once ignored
    # transpose_a / transpose_b and wrote past its output). Tolerance: f64 sums of 8 products.
    B, H, L, E = 2, 3, 5, 8
    q, k, v, weight = (torch.randn(B, H, L, E, dtype=torch.float64) for _ in range(4))
    attn_mask = torch.randn(B, 1, L, L, dtype=torch.float64) if mask == "additive" else None

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=mask == "causal")

    got_in = [t.clone().requires_grad_() for t in (q, k, v)]
    want_in = [t.clone().requires_grad_() for t in (q, k, v)]
    torch._dynamo.reset()
    (torch.compile(f, backend="updraft")(*got_in) * weight).sum().backward()
    (f(*want_in) * weight).sum().backward()
    for a, b in zip(got_in, want_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    ops = updraft.last_report().engine_ops
    assert ops["aten._scaled_dot_product_flash_attention_for_cpu_backward.default"] == 1, ops


def test_flash_backward_in_pytorch_reads_the_engines_log_sum_exp(monkeypatch):
    # Where the engine cannot take the flash backward op (here: its lowering removed), PyTorch
    # runs it on what the engine's forward returned: the result and the log-sum-exp, contiguous
    # where torch's own forward lays them out [B, L, H, E] and [B, L, H], and 0 for a row whose
    # every key is masked. Gradients must still equal eager's.
    from updraft import lowering

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    monkeypatch.delitem(lowering.LOWERINGS, op)
    B, H, L, E = 2, 4, 6, 8
    q, k, v, weight = (torch.randn(B, H, L, E) for _ in range(4))
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    mask[1, :, 2] = False  # a query row with every key masked

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    got_in = [t.clone().requires_grad_() for t in (q, k, v)]
    want_in = [t.clone().requires_grad_() for t in (q, k, v)]
    torch._dynamo.reset()
    (torch.compile(f, backend=get_backend(ENGINE))(*got_in) * weight).sum().backward()
    (f(*want_in) * weight).sum().backward()
    for a, b in zip(got_in, want_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    rep = updraft.last_report()
    assert rep.engine_ops["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 1, str(rep)
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" not in rep.engine_ops, str(rep)


def test_causal_attention_with_dynamic_lengths_stays_in_the_engine():
    # A fine-tune over sequences of several lengths (dynamic=True): the flash backward's causal
    # mask is built from positions in the graph (no constant has a symbolic size), so the
    # backward is not cut around each attention; gradients equal eager's at every length.
    torch.manual_seed(0)
    model = _SelfAttention(math=False)
    model.causal = True
    ref = copy.deepcopy(model)
    torch._dynamo.reset()
    fast = torch.compile(model, backend=get_backend(ENGINE), dynamic=True)
    for L in (7, 9, 12):
        x = torch.randn(2, L, 32)
        for p in list(model.parameters()) + list(ref.parameters()):
            p.grad = None
        fast(x).square().sum().backward()
        ref(x).square().sum().backward()
        assert_grads_match(model, ref)
    rep = updraft.last_report()
    assert _coverage(rep)["training backward"] == 1.0, str(rep)
    assert rep.engine_ops["aten._scaled_dot_product_flash_attention_for_cpu_backward.default"] == 1, str(rep)


def test_measured_choice_keeps_the_faster_side():
    from updraft.training import MeasuredChoice

    now = [0.0]
    cost = {"engine": 2.0, "pytorch": 1.0}
    calls = []

    def side(name):
        def run(args):
            calls.append(name)
            now[0] += cost[name]
            return [sum(args)]
        return run

    chosen = []
    choice = MeasuredChoice(side("engine"), side("pytorch"), lambda c, e, p: chosen.append((c, e, p)),
                            trials=3, clock=lambda: now[0])
    for i in range(12):
        assert choice([1, 2, i]) == [3 + i]  # the values whichever side ran
    # One untimed call each, then 3 timed each, alternating from the engine; then PyTorch only.
    assert calls[:8] == ["engine", "pytorch"] * 4
    assert calls[8:] == ["pytorch"] * 4
    assert chosen == [("pytorch", 2000.0, 1000.0)]


def test_auto_training_follows_eager_and_reports_its_choice():
    model = _mlp()
    ref = copy.deepcopy(model)
    step = torch.compile(_classify_step, backend="updraft")  # the default: training="auto"
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    from updraft.report import Report, set_collector

    rep = Report()
    set_collector(rep)
    try:
        for _ in range(10):
            model.zero_grad()
            ref.zero_grad()
            loss = step(model, x, y)
            torch.testing.assert_close(loss, _classify_step(ref, x, y), rtol=1e-5, atol=0)
            assert_grads_match(model, ref)
    finally:
        set_collector(None)
    rep.graphs = [g for g in rep.graphs if g.kind != "inference"]  # the step's tail after backward()
    # One choice for the step (forward + backward against eager), recorded in both graphs.
    choices = [text for g in rep.graphs for kind, text in g.compiles if kind == "training choice"]
    assert len(choices) == 2 and choices[0] == choices[1], str(rep)
    assert "updraft" in choices[0] and "eager PyTorch" in choices[0], str(rep)
    for g in rep.graphs:  # graphs left to PyTorch count their ops there, with the times
        if choices[0].endswith("runs in eager PyTorch"):
            assert g.engine_compute == 0 and any("ran the training step faster" in r
                                                 for rs in g.reasons.values() for r in rs), str(rep)
        else:
            assert g.fallback_compute == 0, str(rep)


def test_measured_choice_counts_the_backward():
    # A training step's trial is forward + backward: here the engine's forward is faster but
    # its backward slower, and the sum decides.
    from updraft.training import MeasuredChoice

    now = [0.0]
    w = torch.ones(3, requires_grad=True)

    def side(forward_s, backward_s):
        def run(args):
            now[0] += forward_s

            class Slow(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 2

                @staticmethod
                def backward(ctx, g):
                    now[0] += backward_s
                    return g * 2
            return Slow.apply(args[0])
        return run

    chosen = []
    choice = MeasuredChoice(side(1.0, 5.0), side(2.0, 1.0), lambda c, e, p: chosen.append((c, e, p)),
                            trials=3, clock=lambda: now[0], backward=True)
    for _ in range(8):
        choice([w]).sum().backward()
    assert chosen == [("pytorch", 6000.0, 3000.0)]
    assert w.grad is not None and not choice._hooks  # the timing hooks are gone after the choice


def test_compiled_optimizer_step_matches_eager_and_is_timed_against_it():
    # torch.compile(opt.step): an inference graph that writes every parameter and state tensor.
    # Nothing it writes may be frozen (a rebuild per step); the engine writes each in place (no
    # copy-back); the compiled call and Dynamo's graph run eagerly in place are timed over the
    # first calls and the faster keeps it.
    model = _mlp()
    ref = copy.deepcopy(model)
    for p, q in zip(model.parameters(), ref.parameters()):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend="updraft")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no recompile-limit warning
        for _ in range(12):
            step()
            ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    rep = updraft.last_report()
    timed = [t for g in rep.graphs for k, t in g.compiles if k == "input-writing graph" and "timed" in t]
    assert len(timed) == 1 and "updraft (engine, in place)" in timed[0], str(rep)
    assert [(g.input_writes, g.input_writes_in_place) for g in rep.graphs] == [(40, 40)], str(rep)
    written = [t for g in rep.graphs for k, t in g.compiles if k == "input-writing graph" and "written in place" in t]
    assert len(written) == 1 and written[0].endswith(", ... (40 in all)") and written[0].count(", ") == 8, written
    assert not rep.recompiles, str(rep)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["bert", "convnet"])
def test_finetune_curve_follows_eager(task):
    # benchmarks/finetune.py's tasks: 300 AdamW steps from one seed, eager and updraft (the
    # engine forced). The curves may drift apart as f32 ordering differences compound through
    # the updates; measured: largest difference 2.4e-7 (BERT) and 2.9e-4 (ConvNet) against
    # first losses near 1.4, so 2% of the first loss leaves room for another machine's kernels
    # without letting a wrong gradient through (a wrong one moves the curve by far more).
    finetune = _finetune_module()
    eager = finetune.finetune(task, "eager", steps=300)
    got = finetune.finetune(task, "updraft", steps=300)
    worst = max(abs(a - b) for a, b in zip(got["losses"], eager["losses"]))
    assert worst <= 0.02 * eager["losses"][0], f"largest loss difference {worst:.3g}"
    assert eager["losses"][-1] < 0.2 * eager["losses"][0]  # the task is learnt
    assert abs(got["accuracy"] - eager["accuracy"]) <= 2 / 256, (got["accuracy"], eager["accuracy"])


def test_profile_a_training_step():
    model = _mlp()
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    step = _compiled_step(_classify_step)
    prof = updraft.profile(lambda: step(model, x, y), runs=3, train=True)
    ops = {r["op"] for r in prof.rows}
    assert {"linear", "matmul"} <= ops, str(prof)  # forward linears, backward weight gradients


def test_training_graphs_free_their_arenas_unless_told():
    # Training graphs' engine partitions compile with keep_arenas=False (the forward's arena
    # would stay resident through the backward); inference keeps them; the config can force it.
    from updraft import profiler

    def partitions_after(config, grad):
        torch._dynamo.reset()
        before = set(map(id, profiler._partitions))
        model = _mlp()
        with torch.set_grad_enabled(grad):
            out = torch.compile(model, backend=get_backend(config))(torch.randn(4, 32))
            if grad:
                out.sum().backward()
        return [p for p in list(profiler._partitions) if id(p) not in before]

    assert {p.config.keep_arenas for p in partitions_after(ENGINE, True)} == {False}
    assert {p.config.keep_arenas for p in partitions_after(ENGINE, False)} == {None}  # engine default: keep
    forced = CompilerConfig(training="engine", keep_arenas=True)
    assert {p.config.keep_arenas for p in partitions_after(forced, True)} == {True}
    with pytest.raises(TypeError, match="keep_arenas must be True, False or None"):
        CompilerConfig(keep_arenas="no")


def _backward_graph(monkeypatch, config):
    """Compiles one MLP training step under `config`; returns the backward's compiled callable
    and the (shape, dtype, strides) of the inputs its first call got."""
    from updraft import backend

    made, seen = {}, []
    compile_training = backend.compile_training

    def spy(gm, cfg, report, kind):
        made[kind] = compile_training(gm, cfg, report, kind)
        if kind != "training backward":
            return made[kind]

        def record(args):
            seen.extend((t.shape, t.dtype, t.stride()) for t in args)
            return made[kind](args)
        record._boxed_call = True
        return record

    monkeypatch.setattr(backend, "compile_training", spy)
    torch._dynamo.reset()
    model = _mlp()
    torch.compile(model, backend=get_backend(config))(torch.randn(8, 32)).sum().backward()
    return made["training backward"], seen


def test_backward_frees_each_input_after_its_last_engine_step(monkeypatch):
    # A training backward takes AOTAutograd's list of saved activations over and frees each
    # one as soon as the engine's last reader of it has run, as eager autograd does, instead of
    # holding all of them until it returns; its gradients match a call that holds them.
    import weakref

    bw, seen = _backward_graph(monkeypatch, ENGINE)
    graph = bw.__wrapped__
    assert graph._boxed_gm is not None
    assert "saved activations: each freed after its last reader" in str(updraft.last_report())
    torch.manual_seed(0)
    # Every matrix transposed in memory: the bound path's strided inputs, which the plan packs.
    inputs = [torch.randn(s[::-1], dtype=d).t() if len(s) == 2 else torch.randn(s, dtype=d) for s, d, _ in seen]
    assert sum(not t.is_contiguous() for t in inputs) >= 4
    want = graph.gm.forward(*[t.clone() for t in inputs])
    events = []
    for k, t in enumerate(inputs):
        weakref.finalize(t, events.append, k)
    args = inputs
    del inputs, t
    got = bw(args)
    events.append("returned")
    assert args == []
    assert events.index("returned") == len(seen), f"inputs freed after the call returned: {events}"
    for g, w in zip(got, want):
        assert (g is None and w is None) or torch.equal(g, w)


def test_release_saved_false_keeps_the_inputs(monkeypatch):
    bw, seen = _backward_graph(monkeypatch, CompilerConfig(training="engine", release_saved=False))
    assert bw.__wrapped__._boxed_gm is None
    assert "each freed after its last reader" not in str(updraft.last_report())
    args = [torch.empty_strided(s, st, dtype=d).normal_() for s, d, st in seen]
    held = list(args)
    bw(args)
    assert all(a is b for a, b in zip(args, held))
    with pytest.raises(TypeError, match="release_saved must be a bool"):
        CompilerConfig(release_saved="yes")


def test_an_engine_error_after_freeing_inputs_names_itself_and_moves_to_pytorch(monkeypatch):
    # Once the engine has freed an input, PyTorch cannot run the call again: the call raises
    # with the engine's error and the reason, and the partition runs in PyTorch from then on.
    from updraft import engine_partition

    bw, seen = _backward_graph(monkeypatch, ENGINE)
    part = next(m for m in bw.__wrapped__.gm.modules() if isinstance(m, engine_partition.EnginePartition))

    class Failing:
        def __init__(self, planned):
            self.planned = planned

        def run_releasing(self, ptrs, owners, strided, make_output):
            owners[0] = None  # as the engine does after the input's last reader
            raise updraft._C.UpdraftError("[test] a kernel failed")

    part._one.calls = {k: (Failing(v[0]), v[1]) for k, v in part._one.calls.items()}
    args = [torch.empty_strided(s, st, dtype=d).normal_() for s, d, st in seen]
    with pytest.raises(RuntimeError, match=r"a kernel failed.*already freed 1 of this call's .* inputs.*release_saved=False"):
        bw(args)
    assert isinstance(part._one, str) and "a kernel failed" in part._one
    args = [torch.empty_strided(s, st, dtype=d).normal_() for s, d, st in seen]
    keep = [t.clone() for t in args]
    got = bw(args)  # the partition's graph in PyTorch now
    want = bw.__wrapped__.gm.forward(*keep)
    for g, w in zip(got, want):
        assert (g is None and w is None) or torch.allclose(g, w, rtol=1e-5, atol=1e-6)


class _SelfAttention(torch.nn.Module):
    """One attention block as transformers write it: heads split and moved by permutes. In the
    math form (the form of attention with dropout, here with p = 0 to compare with eager) the
    forward saves transposed views of q, k and v for the backward."""

    def __init__(self, dim: int = 32, heads: int = 4, math: bool = True) -> None:
        super().__init__()
        self.heads, self.math, self.causal = heads, math, False
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        from updraft.training import _attention_as_math

        B, L, D = x.shape
        q, k, v = (t.reshape(B, L, self.heads, D // self.heads).permute(0, 2, 1, 3)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = (_attention_as_math if self.math else F.scaled_dot_product_attention)(q, k, v, is_causal=self.causal)
        return self.out(y.permute(0, 2, 1, 3).reshape(B, L, D))


@pytest.mark.parametrize("form", ["math", "flash"])
def test_transposed_saved_activations_reach_the_engine_without_a_copy(monkeypatch, form):
    # math, with views saved as torch's rule saves them (recompute_views=False): the forward
    # saves transposed views (k^T for q k^T's gradient); the backward's engine graph takes each
    # in its memory order and permutes it back inside (engine_partition.input_orders), so its
    # calls pass no strided input for the plan to pack for the whole call. flash (views
    # recomputed, the default): torch traced the flash op's result and log-sum-exp as views
    # ([B, L, H, E] and [B, L, H] in memory); the engine's forward returns them contiguous, and
    # the backward takes the layout its first call gets, not the traced one: nothing to pack; the
    # output projection's input, a view of that result, is recomputed from it, and when the
    # backward runs in PyTorch that view is a reshape (any layout).
    from updraft import backend, engine_partition

    parts = []
    build = engine_partition.EnginePartition._build

    def spy(self, args):
        parts.append(self)
        return build(self, args)

    monkeypatch.setattr(engine_partition.EnginePartition, "_build", spy)
    monkeypatch.setattr(updraft.report, "_warned", set())  # warn_once: each form hears its warning
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = _SelfAttention(math=form == "math"), torch.randn(2, 6, 32)
    ref = copy.deepcopy(model)
    config = CompilerConfig(training="engine", recompute_views=form == "flash")
    fast = torch.compile(model, backend=get_backend(config))
    fast(x).square().sum().backward()
    ref(x).square().sum().backward()
    assert_grads_match(model, ref)
    bw = parts[-1]  # built at the first backward call, after the forward's
    orders = [o for o in bw._one.orders if o is not None]
    assert bool(orders) == (form == "math"), orders  # flash: every input comes contiguous
    strided_calls = []

    class Recording:
        def __init__(self, planned):
            self.planned = planned

        def run_releasing(self, ptrs, owners, strided, make_output):
            strided_calls.append(list(strided))
            return self.planned.run_releasing(ptrs, owners, strided, make_output)

    bw._one.calls = {k: (Recording(v[0]), v[1]) for k, v in bw._one.calls.items()}
    for p in model.parameters():
        p.grad = None
    fast(x).square().sum().backward()
    assert strided_calls == [[]], strided_calls
    assert_grads_match(model, ref)  # the second step's gradients (no optimizer step between)

    class Failing:  # an engine error before any input is freed: PyTorch runs the call again
        def run_releasing(self, ptrs, owners, strided, make_output):
            raise updraft._C.UpdraftError("[test] a kernel failed")

    bw._one.calls = {k: (Failing(), v[1]) for k, v in bw._one.calls.items()}
    for p in model.parameters():
        p.grad = None
    with pytest.warns(RuntimeWarning, match="a kernel failed"):
        fast(x).square().sum().backward()  # the inputs go back in their traced layout
    assert_grads_match(model, ref)
