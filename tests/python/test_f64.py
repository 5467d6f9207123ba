"""float64 models and ops vs eager float64: the compute ops (linear, matmul, conv2d, sdpa) run on
the engine's own f64 kernels (oneDNN 3.2 has no f64 on the CPU), so a float64 model compiles
into one engine partition with no fallback compute op (f64 pooling excepted: it has only the
reference kernel, so a large pooling node stays in PyTorch).

Tolerance: both sides accumulate in f64 and differ only in summation order (ATen's dgemm and
ours block K differently), so a GEMM differs by a few ulps per K-term on values of order 1:
_tol(K) = K * 1e-15 + 1e-13 for single ops (K = 768: ~1e-12), and 1e-9 for whole models, where
layer norms and softmaxes rescale the differences over a few layers. An f32 kernel anywhere on
the path, or a lowering bug, gives errors of 1e-7 or of order 1.
"""
import pytest
import torch
import torch.nn.functional as F

import updraft


def _tol(K):
    return K * 1e-15 + 1e-13


def _run(model, *inputs):
    with torch.no_grad():
        want = model(*inputs)
        rep = updraft.explain(model, *inputs)
        got = torch.compile(model, backend="updraft")(*inputs)
    return want, got, rep


def _all_in_engine(rep):
    assert rep.num_fallback_compute == 0, str(rep)
    assert rep.num_partitions == 1 and all(p.status == "ok" for p in rep.partitions), str(rep)
    assert rep.num_engine_compute > 0, str(rep)


class _Mlp(torch.nn.Module):
    def __init__(self, dims=(37, 64, 29, 7)):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.gelu(x) if i % 2 else torch.relu(x)
        return x


@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 37), (37,)])
def test_mlp(shape):
    model = _Mlp().double().eval()
    x = torch.randn(*shape, dtype=torch.float64)
    want, got, rep = _run(model, x)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=_tol(64), atol=_tol(64))
    _all_in_engine(rep)


def test_linear_residual_and_matmul():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(48, 48)

        def forward(self, x, y):
            h = torch.tanh(self.fc(x) + x)
            return h @ y.transpose(-1, -2), torch.matmul(h[0, 0], y[0].transpose(0, 1))

    x, y = torch.randn(2, 5, 48, dtype=torch.float64), torch.randn(2, 7, 48, dtype=torch.float64)
    model = M().double().eval()
    want, got, rep = _run(model, x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=_tol(48), atol=_tol(48))
    _all_in_engine(rep)


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 1, 1, 1), (2, 0, 1, 1), (1, 2, 2, 1), (2, 1, 1, 4), (1, 1, 1, 8), (1, 3, 1, 8), (2, 1, 2, 2)])
def test_conv2d_sweep(stride, padding, dilation, groups):
    k = 7 if padding == 3 else 3
    conv = torch.nn.Conv2d(8, 16 if groups != 8 else 8, k, stride=stride, padding=padding, dilation=dilation,
                           groups=groups).double().eval()
    x = torch.randn(2, 8, 13, 11, dtype=torch.float64)
    want, got, rep = _run(conv, x)
    torch.testing.assert_close(got, want, rtol=_tol(72), atol=_tol(72))
    _all_in_engine(rep)


@pytest.mark.parametrize("mask", ["none", "bool", "additive", "causal"])
def test_sdpa(mask):
    q = torch.randn(2, 4, 9, 16, dtype=torch.float64)
    k = torch.randn(2, 4, 11, 16, dtype=torch.float64)
    v = torch.randn(2, 4, 11, 8, dtype=torch.float64)
    m = None
    if mask == "bool":
        m = torch.rand(2, 1, 9, 11) > 0.3
        m[0, 0, :2] = False  # rows with every key masked give 0, as eager's CPU sdpa
    elif mask == "additive":
        m = torch.randn(2, 1, 9, 11, dtype=torch.float64)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=mask == "causal")

    want, got, rep = _run(f, q, k, v)
    torch.testing.assert_close(got, want, rtol=_tol(16), atol=_tol(16))
    _all_in_engine(rep)


def _small_bert(layers=2):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=layers, num_attention_heads=4,
                                  intermediate_size=256, vocab_size=1000, attn_implementation="sdpa")
    return transformers.BertModel(cfg).double().eval()


def test_bert_encoder_runs_whole_in_engine():
    torch.manual_seed(0)
    model = _small_bert()
    ids = torch.randint(0, 1000, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 17:] = 0
    want, got, rep = _run(model, ids, mask)
    assert got.last_hidden_state.dtype == torch.float64
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=1e-9, atol=1e-9)
    _all_in_engine(rep)


class _ConvNet(torch.nn.Module):
    """A small ResNet/ConvNeXt-like net: stem, batch norm (folded), residual block, a 7x7
    depthwise conv, 1x1 convs, max / average pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c1 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 7, padding=3, groups=16)
        self.pw = torch.nn.Conv2d(16, 32, 1)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = F.max_pool2d(x, 3, stride=2, padding=1)
        x = torch.relu(self.c1(x) + x)
        x = F.gelu(self.pw(self.dw(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def test_convnet_runs_in_engine_but_its_f64_pooling():
    """Every conv, norm and activation runs in the engine; f64 pooling has only the reference
    kernel (2x slower than PyTorch on a ResNet stem), so a large pooling node stays in PyTorch
    with the reason (the reference-kernel rule, docs/decisions.md)."""
    model = _ConvNet().double().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    want, got, rep = _run(model, x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    pooled = {op for op in rep.fallback_ops if "pool" in op}
    assert pooled and rep.num_fallback_compute == len(pooled), str(rep)
    assert all("no fast CPU kernel for f64" in r for op in pooled for r in rep.reasons[op]), str(rep)
    assert all(p.status == "ok" for p in rep.partitions) and rep.num_engine_compute >= 8, str(rep)
