"""MobileNetV3-Large in plain torch.nn, written from the paper: Howard et al. 2019, "Searching
for MobileNetV3" (arXiv:1905.02244), Table 1 (the Large specification).

Each row of `LARGE` is one bneck of Table 1: kernel, expansion size, output channels, squeeze-
excite or not, nonlinearity (RE = ReLU, HS = hardswish) and stride. The stem is a 3x3 stride-2
conv to 16 channels with hardswish; after the bnecks a 1x1 conv to 960 (hardswish), global
average pooling, a 1x1 "conv" without batch norm to 1280 (hardswish, here a Linear on the
pooled vector), dropout 0.2 and the classifier.

Details the paper leaves to the reference implementation, taken as is standard: channel counts
are rounded with `make_divisible(v, 8)`; the squeeze-excite block squeezes to
make_divisible(expansion / 4, 8) channels, 1x1 conv -> ReLU -> 1x1 conv -> hardsigmoid, and
scales the expanded features; a bneck whose expansion equals its input width has no expansion
conv; a residual joins input and output when the stride is 1 and the widths match; batch norm
uses eps 0.001, momentum 0.01. Init: Kaiming normal (fan_out) for convs, ones/zeros for batch
norm, normal(0, 0.01) for linears, zero biases.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["LARGE", "MobileNetV3", "calibrate_batch_norm", "make_divisible", "mobilenet_v3_large"]

# Table 1, MobileNetV3-Large: (kernel, expansion, out, squeeze-excite, nonlinearity, stride)
LARGE = (
    (3, 16, 16, False, "RE", 1),
    (3, 64, 24, False, "RE", 2),
    (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2),
    (5, 120, 40, True, "RE", 1),
    (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2),
    (3, 200, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 480, 112, True, "HS", 1),
    (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2),
    (5, 960, 160, True, "HS", 1),
    (5, 960, 160, True, "HS", 1),
)
_BN_EPS = 0.001
_BN_MOMENTUM = 0.01


def make_divisible(v: float, divisor: int = 8) -> int:
    """Rounds a channel count to the nearest multiple of `divisor` (at least `divisor`), never
    going more than 10% below `v`."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if out < 0.9 * v:
        out += divisor
    return out


def _act(kind: str) -> nn.Module:
    return nn.Hardswish() if kind == "HS" else nn.ReLU()


def _conv_bn_act(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                 act: str | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=_BN_EPS, momentum=_BN_MOMENTUM),
    ]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Global average pool -> 1x1 conv (squeeze) -> ReLU -> 1x1 conv -> hardsigmoid, which
    scales each channel of the input."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeeze, 1)
        self.relu = nn.ReLU()
        self.expand = nn.Conv2d(squeeze, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.gate(self.expand(self.relu(self.reduce(self.pool(x)))))
        return x * s


class Bneck(nn.Module):
    """The inverted residual block of MobileNetV3: [1x1 expansion conv] -> depthwise kxk conv
    -> [squeeze-excite] -> 1x1 linear projection, with a residual when shapes allow."""

    def __init__(self, cin: int, kernel: int, expansion: int, cout: int, se: bool, act: str,
                 stride: int) -> None:
        super().__init__()
        self.residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expansion != cin:
            layers.append(_conv_bn_act(cin, expansion, 1, act=act))
        layers.append(_conv_bn_act(expansion, expansion, kernel, stride, groups=expansion, act=act))
        if se:
            layers.append(SqueezeExcite(expansion, make_divisible(expansion / 4)))
        layers.append(_conv_bn_act(expansion, cout, 1))  # linear bottleneck: no activation
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    """MobileNetV3 from a bneck table; `width` multiplies every channel count (rounded to 8).
    forward(images [N, 3, H, W]) -> logits [N, num_classes]."""

    def __init__(self, table=LARGE, last_conv: int = 960, last_linear: int = 1280,
                 num_classes: int = 1000, width: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        stem = make_divisible(16 * width)
        layers: list[nn.Module] = [_conv_bn_act(3, stem, 3, 2, act="HS")]
        cin = stem
        for kernel, expansion, cout, se, act, stride in table:
            expansion, cout = make_divisible(expansion * width), make_divisible(cout * width)
            layers.append(Bneck(cin, kernel, expansion, cout, se, act, stride))
            cin = cout
        last = make_divisible(last_conv * width)
        layers.append(_conv_bn_act(cin, last, 1, act="HS"))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last, last_linear), nn.Hardswish(), nn.Dropout(dropout),
            nn.Linear(last_linear, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v3_large(**kwargs) -> MobileNetV3:
    """MobileNetV3-Large (Table 1), random weights, train mode like any new nn.Module."""
    return MobileNetV3(LARGE, last_conv=960, last_linear=1280, **kwargs)


def calibrate_batch_norm(model: nn.Module, images: torch.Tensor) -> None:
    """Sets every batch norm's running mean and variance to the statistics of its input on
    `images` (one forward in train mode with a cumulative average), then restores momentum and
    puts the model in eval mode."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    saved = [bn.momentum for bn in bns]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: after one batch, exactly that batch's statistics
    model.train()
    with torch.no_grad():
        model(images)
    for bn, momentum in zip(bns, saved):
        bn.momentum = momentum
    model.eval()
