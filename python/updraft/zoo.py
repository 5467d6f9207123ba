"""Real models built from configs with random weights (nothing is downloaded).

Used by the demo (`python -m updraft.demo`), the model tests and the benchmarks, so all three
exercise exactly the same models. Each entry returns (model in eval mode, example inputs).
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["MODELS", "build", "first_tensor"]


def _bert(batch: int = 1, seq: int = 128):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig())  # BERT-base: 12 layers, hidden 768, 12 heads
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _gpt2(batch: int = 1, seq: int = 64):
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config())  # GPT-2 small: 12 layers, hidden 768
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _resnet50(batch: int = 1, size: int = 224):
    from transformers import ResNetConfig, ResNetModel

    model = ResNetModel(ResNetConfig())  # defaults are ResNet-50 (depths 3-4-6-3, bottleneck)
    return model, (torch.randn(batch, 3, size, size),)


def _vit(batch: int = 1, size: int = 224):
    from transformers import ViTConfig, ViTModel

    model = ViTModel(ViTConfig(), add_pooling_layer=False)  # ViT-B/16
    return model, (torch.randn(batch, 3, size, size),)


def _mlp(batch: int = 1, width: int = 512, depth: int = 8):
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers), (torch.randn(batch, width),)


def _mobilenet_v2(batch: int = 1, size: int = 224):
    # MobileNetV3 is not in transformers, and torchvision (which has it) is not installed with
    # the pinned torch; MobileNetV2 (depthwise-separable inverted residuals, ReLU6) stands in.
    from transformers import MobileNetV2Config, MobileNetV2Model

    model = MobileNetV2Model(MobileNetV2Config())  # width 1.0, 224 x 224
    return model, (torch.randn(batch, 3, size, size),)


class GPT2DecodeStep(torch.nn.Module):
    """One GPT-2 decode step with a KV cache: forward(ids [B, 1], *keys, *values) where the
    keys/values of each layer are [B, heads, past, head_dim]. The cache object is rebuilt from
    the tensors inside forward, so every call computes the same step (no state grows)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, *kv: torch.Tensor) -> torch.Tensor:
        from transformers import DynamicCache

        n = len(kv) // 2
        cache = DynamicCache()
        for i in range(n):
            cache.update(kv[i], kv[n + i], i)
        return self.model(ids, cache=cache, use_cache=True).last_hidden_state


def _gpt2_decode(batch: int = 1, past: int = 64):
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config()).eval()
    prompt = torch.randint(0, model.config.vocab_size, (batch, past))
    with torch.no_grad():
        layers = model(prompt, use_cache=True).past_key_values.layers
    keys = [layer.keys for layer in layers]
    values = [layer.values for layer in layers]
    ids = torch.randint(0, model.config.vocab_size, (batch, 1))
    return GPT2DecodeStep(model), (ids, *keys, *values)


MODELS: dict[str, Callable[..., tuple[torch.nn.Module, tuple]]] = {
    "resnet50": _resnet50,
    "bert": _bert,
    "gpt2": _gpt2,
    "vit": _vit,
    "mlp": _mlp,
    "mobilenet_v2": _mobilenet_v2,
    "gpt2_decode": _gpt2_decode,
}


def build(name: str, seed: int = 0, **kwargs):
    """Builds model `name` with random weights (seeded) in eval mode, plus example inputs."""
    if name not in MODELS:
        raise ValueError(f"[updraft.zoo] unknown model '{name}'; choose one of {sorted(MODELS)}")
    torch.manual_seed(seed)
    model, inputs = MODELS[name](**kwargs)
    return model.eval(), inputs


def first_tensor(out):
    """The main tensor of a model output: a tensor, `last_hidden_state`, or the first element."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    raise TypeError(f"[updraft.zoo] cannot find a tensor in a model output of type {type(out).__name__}")
