"""Real models built from configs with random weights (nothing is downloaded).

Used by the demo (`python -m updraft.demo`), the model tests and the benchmarks, so all three
exercise exactly the same models. Each entry returns (model in eval mode, example inputs).
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["MODELS", "build"]


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


MODELS: dict[str, Callable[..., tuple[torch.nn.Module, tuple]]] = {
    "resnet50": _resnet50,
    "bert": _bert,
    "gpt2": _gpt2,
    "vit": _vit,
    "mlp": _mlp,
}


def build(name: str, seed: int = 0, **kwargs):
    """Builds model `name` with random weights (seeded) in eval mode, plus example inputs."""
    if name not in MODELS:
        raise ValueError(f"[updraft.zoo] unknown model '{name}'; choose one of {sorted(MODELS)}")
    torch.manual_seed(seed)
    model, inputs = MODELS[name](**kwargs)
    return model.eval(), inputs
