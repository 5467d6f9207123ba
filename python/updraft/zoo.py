"""Real models built from configs with random weights (nothing is downloaded).

Used by the demo (`python -m updraft.demo`), the model tests and the benchmarks, so all three
exercise exactly the same models. Each entry returns (model in eval mode, example inputs).
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["MODELS", "build", "causal_lm", "first_tensor", "greedy_decode"]


def _bert(batch: int = 1, seq: int = 128, layers: int = 12):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(num_hidden_layers=layers))  # BERT-base: 12 layers, hidden 768, 12 heads
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _gpt2(batch: int = 1, seq: int = 64, layers: int = 12):
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=layers))  # GPT-2 small: 12 layers, hidden 768
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _resnet50(batch: int = 1, size: int = 224, depths: tuple = (3, 4, 6, 3)):
    from transformers import ResNetConfig, ResNetModel

    # defaults are ResNet-50 (depths 3-4-6-3, bottleneck)
    model = ResNetModel(ResNetConfig(depths=list(depths)))
    return model, (torch.randn(batch, 3, size, size),)


def _vit(batch: int = 1, size: int = 224, layers: int = 12):
    from transformers import ViTConfig, ViTModel

    model = ViTModel(ViTConfig(num_hidden_layers=layers), add_pooling_layer=False)  # ViT-B/16
    return model, (torch.randn(batch, 3, size, size),)


def _mlp(batch: int = 1, width: int = 512, depth: int = 8):
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers), (torch.randn(batch, width),)


def _mobilenet_v2(batch: int = 1, size: int = 224):
    # Depthwise-separable inverted residuals, ReLU6 (transformers' MobileNetV2).
    from transformers import MobileNetV2Config, MobileNetV2Model

    model = MobileNetV2Model(MobileNetV2Config())  # width 1.0, 224 x 224
    return model, (torch.randn(batch, 3, size, size),)


def _mobilenet_v3(batch: int = 1, size: int = 224):
    # MobileNetV3-Large (Table 1 of the paper) in plain torch.nn (python/updraft/zoo_mobilenet_v3.py):
    # neither transformers nor torchvision (which does not import with the pinned torch) can
    # provide it. DenseNet, which only torchvision has, is still not in the zoo. Hardswish,
    # squeeze-excitation with a hardsigmoid gate, 3x3 and 5x5 depthwise convs; output: logits
    # [batch, 1000].
    from updraft.zoo_mobilenet_v3 import calibrate_batch_norm, mobilenet_v3_large

    model = mobilenet_v3_large()
    # With the paper's init (Kaiming fan_out) and fresh running stats (mean 0, var 1), each
    # depthwise conv shrinks activations by about sqrt(channels): the eval-mode logits come out
    # near 1e-9, where a comparison with eager tests nothing. One train-mode forward on a random
    # calibration batch sets every batch norm's running stats to its real input statistics, so
    # features stay O(1) through the network (logits are ~1e-2: the classifier's normal(0, 0.01)).
    calibrate_batch_norm(model, torch.randn(8, 3, size, size))
    return model, (torch.randn(batch, 3, size, size),)


def _efficientnet_b0(batch: int = 1, size: int = 224):
    # Squeeze-excitation blocks, swish, depthwise convs with TF-style "same" padding. HF's own
    # weight init leaves every activation after the stem exactly zero (nothing to compare), so
    # convs, batch norms and the head take PyTorch's default init instead (still random).
    from transformers import EfficientNetConfig, EfficientNetModel

    model = EfficientNetModel(EfficientNetConfig())
    for mod in model.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.Linear)):
            mod.reset_parameters()
    return model, (torch.randn(batch, 3, size, size),)


def _regnet(batch: int = 1, size: int = 224):
    # RegNet (HF's default config): grouped 3x3 convs in bottlenecks, squeeze-excitation.
    from transformers import RegNetConfig, RegNetModel

    return RegNetModel(RegNetConfig()), (torch.randn(batch, 3, size, size),)


def _roberta(batch: int = 1, seq: int = 128, layers: int = 12):
    from transformers import RobertaConfig, RobertaModel

    # RoBERTa-base (hidden 768, 12 heads); position ids come from a cumsum over the non-pad mask.
    model = RobertaModel(RobertaConfig(num_hidden_layers=layers), add_pooling_layer=False)
    ids = torch.randint(3, model.config.vocab_size, (batch, seq))  # 0-2 are <s>, <pad>, </s>
    return model, (ids,)


def _distilbert(batch: int = 1, seq: int = 128, layers: int = 6):
    from transformers import DistilBertConfig, DistilBertModel

    model = DistilBertModel(DistilBertConfig(n_layers=layers))  # distilbert-base: 6 x 768, 12 heads
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _llama_config(layers: int = 4):
    from transformers import LlamaConfig

    # A small Llama: hidden 256, 8 query heads sharing 2 key/value heads (grouped-query
    # attention), rotary embeddings (theta 10000), SwiGLU MLP 688, RMS norm, vocab 32000.
    return LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=layers,
                       num_attention_heads=8, num_key_value_heads=2, vocab_size=32000,
                       max_position_embeddings=512, attn_implementation="sdpa")


def _llama(batch: int = 1, seq: int = 64, layers: int = 4):
    from transformers import LlamaModel

    model = LlamaModel(_llama_config(layers))
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _t5_config(layers: int = 6):
    from transformers import T5Config

    # T5-small: d_model 512, 8 heads of 64, d_ff 2048 (ReLU), 6 + 6 layers, relative position
    # buckets, RMS-style layer norm without bias.
    return T5Config(num_layers=layers, num_decoder_layers=layers)


def _t5_encoder(batch: int = 1, seq: int = 64, layers: int = 6):
    from transformers import T5EncoderModel

    model = T5EncoderModel(_t5_config(layers))
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model, (ids,)


def _t5(batch: int = 1, seq: int = 64, target: int = 16, layers: int = 6):
    from transformers import T5Model

    model = T5Model(_t5_config(layers))  # encoder and decoder; output = decoder hidden state
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    dec = torch.randint(0, model.config.vocab_size, (batch, target))
    return _T5Forward(model), (ids, dec)


class _T5Forward(torch.nn.Module):
    """T5Model called positionally: forward(input_ids, decoder_input_ids)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, dec: torch.Tensor):
        return self.model(input_ids=ids, decoder_input_ids=dec)


def _whisper_encoder(batch: int = 1, layers: int = 4):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    # Whisper-tiny encoder: 80 mel bins, two conv1d (k=3, the second stride 2), 4 layers of
    # d_model 384, 6 heads, ffn 1536; 3000 input frames -> 1500 positions (fixed by the model).
    cfg = WhisperConfig(num_mel_bins=80, d_model=384, encoder_layers=layers, encoder_attention_heads=6,
                        encoder_ffn_dim=1536, decoder_layers=layers, decoder_attention_heads=6,
                        decoder_ffn_dim=1536)
    model = WhisperEncoder(cfg)
    return model, (torch.randn(batch, cfg.num_mel_bins, 2 * cfg.max_source_positions),)


def _deit(batch: int = 1, size: int = 224, layers: int = 12):
    from transformers import DeiTConfig, DeiTModel

    # DeiT-tiny/16: hidden 192, 12 layers, 3 heads, MLP 768; class + distillation tokens.
    cfg = DeiTConfig(hidden_size=192, num_hidden_layers=layers, num_attention_heads=3, intermediate_size=768)
    model = DeiTModel(cfg, add_pooling_layer=False)
    return model, (torch.randn(batch, 3, size, size),)


def _swin(batch: int = 1, size: int = 224, depths: tuple = (2, 2, 6, 2)):
    from transformers import SwinConfig, SwinModel

    # Swin-T: embed 96, depths 2-2-6-2, heads 3-6-12-24, window 7 (shifted windows).
    model = SwinModel(SwinConfig(depths=list(depths)), add_pooling_layer=False)
    return model, (torch.randn(batch, 3, size, size),)


def _convnext(batch: int = 1, size: int = 224, depths: tuple = (3, 3, 9, 3)):
    from transformers import ConvNextConfig, ConvNextModel

    # ConvNeXt-T: dims 96-192-384-768, depths 3-3-9-3, 7x7 depthwise convs, layer scale.
    model = ConvNextModel(ConvNextConfig(depths=list(depths)))
    return model, (torch.randn(batch, 3, size, size),)


class DecodeStep(torch.nn.Module):
    """One decode step with a KV cache: forward(ids [B, 1], *keys, *values) where the keys/values
    of each layer are [B, kv_heads, past, head_dim]. The cache object is rebuilt from the tensors
    inside forward, so every call computes the same step (no state grows). Returns the model's
    last hidden state for the new token."""

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


class CausalLMStep(torch.nn.Module):
    """One step of greedy decoding with a KV cache, cache as plain tensors:
    forward(ids [B, T], *keys, *values) -> (logits of the last position [B, vocab], *new keys,
    *new values). With no cache tensors it is the prefill of the prompt. The cache object is
    rebuilt inside forward, so the compiled graph has tensors in and tensors out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, *kv: torch.Tensor):
        from transformers import DynamicCache

        n = len(kv) // 2
        cache = DynamicCache()
        for i in range(n):
            cache.update(kv[i], kv[n + i], i)
        out = self.model(ids, cache=cache, use_cache=True)
        layers = out.cache.layers
        return (out.logits[:, -1], *[layer.keys for layer in layers], *[layer.values for layer in layers])


def causal_lm(name: str, layers: int | None = None) -> CausalLMStep:
    """A language model with its LM head ("gpt2": GPT-2 small, "llama": the small Llama config),
    random weights, eval mode, wrapped as a CausalLMStep."""
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(n_layer=layers or 12))
    elif name == "llama":
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(_llama_config(layers or 4))
    else:
        raise ValueError(f"[updraft.zoo] no causal LM named '{name}'; choose gpt2 or llama")
    return CausalLMStep(model.eval()).eval()


def greedy_decode(step, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding with a KV cache: `step` is a CausalLMStep (or a compiled one); returns the
    `new_tokens` chosen tokens [B, new_tokens]. Each step feeds one token and the cache."""
    out = step(prompt)
    logits, kv = out[0], out[1:]
    tokens = []
    for _ in range(new_tokens):
        nxt = logits.argmax(dim=-1, keepdim=True)
        tokens.append(nxt)
        out = step(nxt, *kv)
        logits, kv = out[0], out[1:]
    return torch.cat(tokens, dim=1)


def _decode_inputs(model: torch.nn.Module, batch: int, past: int):
    prompt = torch.randint(0, model.config.vocab_size, (batch, past))
    with torch.no_grad():
        layers = model(prompt, use_cache=True).cache.layers
    keys = [layer.keys for layer in layers]
    values = [layer.values for layer in layers]
    ids = torch.randint(0, model.config.vocab_size, (batch, 1))
    return DecodeStep(model), (ids, *keys, *values)


def _gpt2_decode(batch: int = 1, past: int = 64):
    from transformers import GPT2Config, GPT2Model

    return _decode_inputs(GPT2Model(GPT2Config()).eval(), batch, past)


def _llama_decode(batch: int = 1, past: int = 64, layers: int = 4):
    from transformers import LlamaModel

    return _decode_inputs(LlamaModel(_llama_config(layers)).eval(), batch, past)


MODELS: dict[str, Callable[..., tuple[torch.nn.Module, tuple]]] = {
    "resnet50": _resnet50,
    "bert": _bert,
    "gpt2": _gpt2,
    "vit": _vit,
    "mlp": _mlp,
    "mobilenet_v2": _mobilenet_v2,
    "mobilenet_v3": _mobilenet_v3,
    "efficientnet_b0": _efficientnet_b0,
    "regnet": _regnet,
    "roberta": _roberta,
    "distilbert": _distilbert,
    "llama": _llama,
    "t5_encoder": _t5_encoder,
    "t5": _t5,
    "whisper_encoder": _whisper_encoder,
    "deit": _deit,
    "swin": _swin,
    "convnext": _convnext,
    "gpt2_decode": _gpt2_decode,
    "llama_decode": _llama_decode,
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


class MainOutput(torch.nn.Module):
    """`model` returning its main output only (first_tensor), called with fixed keyword
    arguments too (`MainOutput(llm, use_cache=False)`): what updraft.export and the peers'
    exporters take, since an exported graph cannot return transformers' output or cache objects."""

    def __init__(self, model: torch.nn.Module, **kwargs):
        super().__init__()
        self.inner = model
        self.kwargs = kwargs

    def forward(self, *args):
        return first_tensor(self.inner(*args, **self.kwargs))
