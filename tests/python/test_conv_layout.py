"""Channel-blocked conv layouts (CompilerConfig.conv_layout) and the step profiler.

Tolerance: f32 conv nets, 1e-4 relative + absolute against eager. oneDNN's direct and gemm
convolutions sum the C*kh*kw products in different orders than PyTorch's, a few ulps times
sqrt(K) per layer; the blocked layout only reorders memory, not arithmetic, beyond that.
"""
import pytest
import torch
from torch import nn

import updraft
from updraft import _C as C

RTOL = ATOL = 1e-4


class Bottleneck(nn.Module):
    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU())
        self.c = nn.Sequential(nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(self.c(self.b(self.a(x))) + x)


class SmallConvNet(nn.Module):
    """A stem on a 3-channel image, max pooling, two bottlenecks, a depthwise conv, a conv
    whose 24 channels do not divide into blocks, and a classifier head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.blocks = nn.Sequential(Bottleneck(32, 16), Bottleneck(32, 16))
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.odd = nn.Conv2d(32, 24, 1)
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        y = self.dw(self.blocks(self.pool(self.stem(x))))
        y = torch.relu(self.odd(y))
        return self.head(y.mean(dim=(2, 3)))


def _model():
    torch.manual_seed(0)
    m = SmallConvNet().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics, so the folding matters
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    return m


@pytest.mark.parametrize("layout", ["auto", "nchw", "nchw8c", "nchw16c", "nhwc"])
def test_conv_net_matches_eager_in_both_layouts(layout):
    m = _model()
    x = torch.randn(2, 3, 33, 29)
    with torch.no_grad():
        want = m(x)
        fast = torch.compile(m, backend="updraft", options={"conv_layout": layout})
        got = fast(x)
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        prof = updraft.profile(fast, x, runs=2, warmup=1)
    kernels = [r["kernel"] for r in prof.rows]
    conv_kernels = [k for k in kernels if "conv2d" in k]
    assert conv_kernels, prof
    # Neither layout may push a conv onto oneDNN's reference loops.
    assert not any(":ref:" in k for k in conv_kernels), prof
    # A layout's edges are reorders (channel_block); between them the pool runs in the layout.
    blocked = any(r["op"] == "channel_block" or ":block" in r["kernel"] for r in prof.rows)
    if layout != "nchw" and (layout != "auto" or C.preferred_channel_block() != 0):
        assert blocked, prof
        assert any(":gemm:" not in k for k in conv_kernels), prof  # direct or brgemm kernels
    if layout == "nchw":
        assert not blocked, prof


@pytest.mark.parametrize("act", [nn.ReLU6, nn.Hardswish, nn.SiLU, nn.GELU])
def test_plain_convs_apply_their_activation_after_the_gemm(act):
    """In plain NCHW oneDNN runs a conv as its gemm-based convolution, whose post-ops go one
    element at a time (2-18x the conv's own time; docs/BENCHMARKS.md, "Issue 19: activations
    after gemm-based convolutions"): there the activation runs after the primitive, relu6 in the
    engine's pass and the others in an eltwise primitive ("act_after"), never fused."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(8, 32, 1), act(), nn.Conv2d(32, 16, 3, padding=1), act()).eval()
    x = torch.randn(2, 8, 20, 20)
    with torch.no_grad():
        want = m(x)
        fast = torch.compile(m, backend="updraft", options={"conv_layout": "nchw"})
        torch.testing.assert_close(fast(x), want, rtol=RTOL, atol=ATOL)
        prof = updraft.profile(fast, x, runs=2, warmup=1)
    convs = [r["kernel"] for r in prof.rows if r["op"] == "conv2d"]
    assert convs and all(":gemm:" in k for k in convs), prof
    assert not any("act_fused" in k for k in convs), prof
    assert all((":act_after" in k) == (act is not nn.ReLU6) for k in convs), prof
    assert not any(r["op"] in ("hardswish", "silu", "gelu", "clamp") for r in prof.rows), prof  # fused, not a step


def test_dynamic_batch_and_image_size_with_blocked_layout():
    m = _model()
    fast = torch.compile(m, backend="updraft", dynamic=True)  # batch and image size
    with torch.no_grad():
        for n, size in ((1, 24), (3, 24), (2, 31), (1, 17)):
            x = torch.randn(n, 3, size, size)
            torch.testing.assert_close(fast(x), m(x), rtol=RTOL, atol=ATOL)
    # Symbolic image sizes: the residual add's two operands are built from different window
    # expressions ((s+2)-3)+1 and s, which must simplify to equal sizes, or the whole
    # partition would run in PyTorch.
    statuses = [p.status for g in updraft.last_report().graphs for p in g.partitions]
    assert statuses and all(s == "ok" for s in statuses), statuses


def test_conv_layout_is_validated(monkeypatch):
    with pytest.raises(ValueError, match="conv_layout"):
        updraft.CompilerConfig(conv_layout="nchw4c")
    # The Python names map onto the engine's codes (src/kernels/channel_block.h).
    assert updraft.CompilerConfig(conv_layout="nhwc").engine_options()["channel_block"] == C.CHANNELS_LAST
    monkeypatch.setenv("UPDRAFT_CONV_LAYOUT", "nchw")
    assert updraft.CompilerConfig().conv_layout == "nchw"
    assert updraft.CompilerConfig().engine_options()["channel_block"] == 0
    # The layout changes the optimised graph, so it is part of the compile-cache key.
    assert updraft.CompilerConfig().cache_options()["conv_layout"] == "nchw"


def test_profile_reports_engine_steps():
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    fast = torch.compile(m, backend="updraft")
    x = torch.randn(4, 16)
    prof = updraft.profile(fast, x, runs=5)
    assert prof.runs == 5 and prof.wall_ms > 0 and prof.engine_ms > 0
    assert {r["op"] for r in prof.rows} >= {"linear"}
    assert abs(sum(r["share"] for r in prof.rows) - 1.0) < 1e-6
    assert "ms per run" in str(prof)
    with pytest.raises(ValueError, match="runs"):
        updraft.profile(fast, x, runs=0)


# Convs for which oneDNN v3.2 has no jit kernel in the blocked layout (large "same" padding
# against the input) and, before issue 13, ran its reference loops 100-2000x slower than eager:
# a speech encoder's positional conv, a 15x15 conv on 32x32, a 7x7 conv padded by 7 on 16x16.
REFERENCE_PRONE = [
    ("conv1d_k32_p16", lambda: torch.nn.Conv1d(16, 16, 32, padding=16, groups=1), (2, 16, 49)),
    ("conv2d_k15_p7", lambda: torch.nn.Conv2d(16, 16, 15, padding=7), (1, 16, 32, 32)),
    ("conv2d_k7_p7", lambda: torch.nn.Conv2d(8, 8, 7, padding=7), (1, 8, 16, 16)),
]


@pytest.mark.parametrize("layout", ["auto", "nchw", "nchw8c", "nchw16c", "nhwc"])
@pytest.mark.parametrize("name,make,shape", REFERENCE_PRONE, ids=[c[0] for c in REFERENCE_PRONE])
def test_no_conv_lands_on_a_reference_kernel(layout, name, make, shape):
    torch.manual_seed(0)
    conv = make()
    # Between two blockable convs, so the "auto" layout blocks the problem conv's neighbours.
    c = shape[1]
    other = type(conv)(c, c, 3, padding=1)
    m = torch.nn.Sequential(other, torch.nn.ReLU(), conv, torch.nn.ReLU(), type(conv)(c, c, 1)).eval()
    x = torch.randn(*shape)
    torch._dynamo.reset()
    with torch.no_grad():
        fast = torch.compile(m, backend="updraft", options={"conv_layout": layout})
        torch.testing.assert_close(fast(x), m(x), rtol=RTOL, atol=ATOL)
        prof = updraft.profile(fast, x, runs=1, warmup=0)
    conv_rows = [r for r in prof.rows if "conv2d" in r["kernel"]]
    assert sum(r["steps"] for r in conv_rows) == 3, prof  # every conv ran in the engine
    assert not any(":ref:" in r["kernel"] for r in conv_rows), prof
