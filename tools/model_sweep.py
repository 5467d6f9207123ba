"""Sweeps architectures that no issue names through updraft and compares them with eager.

Each transformers architecture is built from its default config shrunk to two layers of width
64; torchvision's classifiers come as `tv:NAME` (torchvision from build/torchvision, as the tests
take it: tools/torchvision_cpu.py). Random weights, nothing downloaded, every dropout, drop
path, layer drop and SpecAugment probability at 0. Each row runs once eagerly and once through
`torch.compile(backend=get_backend(CompilerConfig(inference="engine", training="engine")))`
(the engine's kernels, whatever the timing would choose), in a fresh process:
- `infer`: eval, no_grad; every floating output;
- `train`: train mode, loss = a fixed random projection of the first floating output; the
  outputs and every parameter's gradient;
- `infer64`, `train64`: the same in float64 (the engine's f64 kernels).

A value's error is max |a - b| / max |b| (b eager's), gradients scaled by at least GRAD_FLOOR of
the model's largest gradient. A row fails above TOL (f32: GEMMs and convolutions summed in
another order than ATen's give about 1e-6 relative per op, a few layers about 1e-5; a lowering
bug gives errors of order 1) or TOL64, or above NOISE_FACTOR times what rounding alone moves
that value in eager (`_noise`), and says `noisy` when it passed only by that allowance. A model
that the installed transformers cannot build or run eagerly, or whose eager outputs hold NaN, is
`skip` (not updraft's doing); an exception from the compiled call is a failure.
docs/testing.md ("Architectures no issue names") gives the reasons and the last run.

    python tools/model_sweep.py [--modes infer,train,train64] [--models a,tv:b,...] [--json F]
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import time

TOL = 1e-3
GRAD_FLOOR = 1e-4
NOISE_FACTOR = 10
PERTURB = 1e-6
# f64 rows (`infer64`, `train64`: model and inputs in float64, the engine's f64 kernels): rounding
# is 1e-16, so even a model that amplifies it 1e5 times stays far below this, and a lowering bug
# far above. Not 1e-10: ATen's own f64 kernels are not all f64-exact (hardsigmoid_backward
# multiplies by 1/6 rounded to f32, 3e-8 relative; the engine's decomposition keeps 1/6 in f64).
# Their noise estimate nudges by PERTURB64 (a few f64 ulps).
TOL64 = 1e-6
PERTURB64 = 1e-14

# Architectures of the installed transformers that no issue or zoo entry names, chosen to cover
# the op families models bring: relative/rotary/alibi positions, pre/post norms, gated MLPs,
# convolutional stems, depthwise convs, audio feature extractors, MoE routing, encoder-decoders.
DEFAULT_MODELS = [
    "albert", "bart", "bloom", "convbert", "deberta", "deberta-v2", "electra", "falcon", "xlnet",
    "longformer", "big_bird", "gpt_neo", "gpt_neox", "gptj", "mobilebert", "mpnet", "xlm-roberta",
    "squeezebert", "codegen", "biogpt", "stablelm", "starcoder2", "gemma2", "olmo", "cohere", "phi",
    "qwen2_moe", "mixtral", "beit", "data2vec-vision", "dinov2", "segformer", "levit", "poolformer",
    "mobilevit", "convnextv2", "cvt", "bit", "wav2vec2", "hubert", "clip_vision_model",
    "clip_text_model", "mbart", "pegasus", "marian", "m2m_100", "layoutlm", "fnet", "ibert",
    "canine", "yoso", "nystromformer", "rembert", "ernie", "roformer", "xglm", "opt", "granite",
    "helium", "glm",
]

SMALL = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=128, embedding_size=64, d_model=64, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    n_embd=64, n_layer=2, n_head=4, n_inner=128, ffn_dim=128, num_layers=2, num_heads=4,
    vocab_size=512, max_position_embeddings=128, num_local_experts=4, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
    head_dim=16, rotary_dim=8, partial_rotary_factor=0.5,
)
# Config keys of train-mode randomness (dropout, drop path, layer drop, SpecAugment), set to 0.
RANDOM_KEYS = ("dropout", "_pdrop", "drop_rate", "drop_path", "layerdrop", "mask_time_prob", "mask_feature_prob")
VISION_SMALL = dict(image_size=64)  # patch sizes stay: a convnet stem's patch is its stride

# torchvision classifiers (`tv:NAME`): 10 classes, batch 4 at 96 x 96 (Inception v3 needs 75 at
# least; four samples keep train-mode batch norm at the last 3 x 3 stage from two-sample noise).
TV_MODELS = ["tv:resnet18", "tv:mobilenet_v3_small", "tv:efficientnet_b0", "tv:densenet121",
             "tv:googlenet", "tv:inception_v3", "tv:shufflenet_v2_x1_0", "tv:squeezenet1_1",
             "tv:mnasnet0_5", "tv:regnet_y_400mf", "tv:convnext_tiny", "tv:resnext50_32x4d",
             "tv:wide_resnet50_2", "tv:alexnet", "tv:vgg11_bn", "tv:swin_t"]
TV_KWARGS = {"googlenet": dict(aux_logits=False, init_weights=True),
             "inception_v3": dict(aux_logits=False, init_weights=True)}
TV_BATCH, TV_SIDE = 4, 96


def _shrink(cfg):
    for key, value in {**SMALL, **VISION_SMALL}.items():
        # A config with per-stage lists (hidden_sizes, depths) derives the scalar from them.
        # An alias (attribute_map) may stand for something else (ConvNeXt's num_stages).
        per_stage = isinstance(getattr(cfg, key + "s", None), (list, tuple))
        alias = key in getattr(cfg, "attribute_map", {})
        if hasattr(cfg, key) and isinstance(getattr(cfg, key), type(value)) and not (per_stage or alias):
            try:
                setattr(cfg, key, value)
            except Exception:  # noqa: BLE001 - some configs make a key read-only
                pass
    for key in list(vars(cfg)):
        value = getattr(cfg, key)
        if any(word in key for word in RANDOM_KEYS):
            if isinstance(value, float):
                setattr(cfg, key, 0.0)
            elif isinstance(value, (list, tuple)) and all(isinstance(v, float) for v in value):
                setattr(cfg, key, type(value)(0.0 for _ in value))
    if hasattr(cfg, "pad_token_id") and isinstance(cfg.pad_token_id, int):
        cfg.pad_token_id = min(cfg.pad_token_id, getattr(cfg, "vocab_size", 512) - 1)
    return cfg


def _inputs(model, cfg, batch=2, seq=16):
    import torch

    name = model.main_input_name
    if name == "input_ids":
        vocab = getattr(cfg, "vocab_size", 512)
        ids = torch.randint(3, min(vocab, 512), (batch, seq))
        kw = {"input_ids": ids}
        if "attention_mask" in model.forward.__code__.co_varnames:
            mask = torch.ones(batch, seq, dtype=torch.long)
            mask[1, -3:] = 0  # one padded row: masks reach the attention
            kw["attention_mask"] = mask
        if getattr(cfg, "is_encoder_decoder", False):
            kw["decoder_input_ids"] = ids[:, : seq // 2]
        return kw
    if name == "pixel_values":
        size = getattr(cfg, "image_size", 64)
        size = size[0] if isinstance(size, (list, tuple)) else size
        return {"pixel_values": torch.randn(batch, getattr(cfg, "num_channels", 3), size, size)}
    if name == "input_values":
        return {"input_values": torch.randn(batch, 4000)}
    raise ValueError(f"no inputs for main_input_name={name!r}")


def _floats(out):
    from updraft.debug._common import flatten_outputs

    return [t for t in flatten_outputs(out) if t.is_floating_point()]


def _strides(t) -> tuple:
    """t's strides over its dims longer than 1 (a dim of one element has no layout)."""
    return tuple(st for n, st in zip(t.shape, t.stride()) if n > 1)


def _rel(a, b, floor: float = 0.0) -> float:
    """max |a - b| / max |b| (updraft.debug.compare's normwise error: NaN against NaN is equal,
    against a number infinitely off), the scale at least `floor`."""
    from updraft.debug.compare import normwise_errors

    err, _, scale = normwise_errors(a, b)
    return err / max(scale, floor, 1e-30) if err else 0.0


def _to_f64(kw: dict) -> dict:
    return {k: v.double() if v.is_floating_point() else v for k, v in kw.items()}


def _zero_dropout(model):
    import torch

    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout) or type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0


def _build(arch):
    """(model, keyword inputs) for a transformers model type, or `tv:NAME` for torchvision's."""
    import torch

    torch.manual_seed(0)
    if arch.startswith("tv:"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torchvision_cpu

        models = torchvision_cpu.activate().models
        model = models.get_model(arch[3:], num_classes=10, **TV_KWARGS.get(arch[3:], {}))
        _zero_dropout(model)
        torch.manual_seed(1)
        return model, {"x": torch.randn(TV_BATCH, 3, TV_SIDE, TV_SIDE)}
    from transformers import AutoConfig, AutoModel

    cfg = _shrink(AutoConfig.for_model(arch))
    model = AutoModel.from_config(cfg)
    _zero_dropout(model)
    torch.manual_seed(1)
    return model, _inputs(model, cfg)


def _run(fn, model, kw, mode, proj=None):
    """One call: the floating outputs, and in `train` the gradients of proj . output 0 by name."""
    import torch

    if mode == "infer":
        with torch.no_grad():
            return [t.detach() for t in _floats(fn(**kw))], {}, None
    out = _floats(fn(**kw))
    if proj is None:
        proj = torch.randn_like(out[0])
    (out[0] * proj.to(out[0].dtype)).sum().backward()
    # torch.compile (any backend, aot_eager too) gives zeros where eager leaves None for
    # parameters the loss does not reach: a missing gradient counts as zeros.
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
             for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return [t.detach() for t in out], grads, proj


def _errors(got, want, mode):
    """{name: relative error} over outputs (out0, out1, ...) and gradients (by parameter name)."""
    outs, grads = got
    want_outs, want_grads = want
    errs = {f"out{i}": _rel(g.to(w.dtype), w) for i, (g, w) in enumerate(zip(outs, want_outs))}
    if mode == "train":
        # A gradient that is zero in exact arithmetic (an attention key's bias: softmax ignores a
        # per-row constant) is rounding noise in both runs, so its own magnitude is no scale:
        # errors are relative to at least GRAD_FLOOR of the largest gradient of the model.
        top = max((float(g.abs().max()) for g in want_grads.values() if g.numel()), default=0.0)
        errs.update({n: _rel(grads[n].to(w.dtype), w, GRAD_FLOOR * top) for n, w in want_grads.items()})
    return errs


def _computes_f32(model, kw, mode, proj) -> bool:
    """Whether an eager call of this (f64) model makes any float32 tensor: a model that computes
    parts in f32 on purpose (DeBERTa's layer norm, BLOOM's softmax) has f32 rounding in its f64
    outputs, and its f64 row is judged by the f32 rule."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else [out]
            self.seen |= any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in outs)
            return out

    m = copy.deepcopy(model)
    with Watch() as watch:
        _run(m, m, kw, mode, proj)
    return watch.seen


def _noise(model, kw, mode, proj, want, f64: bool) -> dict:
    """How far rounding alone moves each value in eager: eager with inputs and parameters changed
    by a few ulps (PERTURB, PERTURB64) against eager, and for an f32 row also eager in f64
    against eager. Some models amplify such changes to order 1 even in eager (train-mode batch
    norm over two samples per channel, ReLU masks flipping under a weight-standardised conv:
    BiT's gradients move by 10% under a 1e-7 input change); and some f64 models compute parts in
    f32 on purpose (DeBERTa's layer norm casts to float), so f32 rounding reaches their f64
    outputs. Such values get NOISE_FACTOR times the gap as tolerance (the rule of
    updraft.debug.compare), and the row says `noisy`."""
    import torch

    gaps = []
    if not f64:
        try:
            m64 = copy.deepcopy(model).double()
            o64, g64, _ = _run(m64, m64, _to_f64(kw), mode, proj)
            gaps.append(_errors(want, (o64, g64), mode))
        except Exception:  # noqa: BLE001 - a model without f64 kernels: the perturbation alone
            pass
    gen = torch.Generator().manual_seed(2)
    size = PERTURB64 if f64 else PERTURB

    def nudge(t):
        return t * (1 + size * torch.randn(t.shape, generator=gen, dtype=t.dtype))

    mp = copy.deepcopy(model)
    with torch.no_grad():
        for p in mp.parameters():
            p.copy_(nudge(p))
    kwp = {k: nudge(v) if v.is_floating_point() else v for k, v in kw.items()}
    op, gp, _ = _run(mp, mp, kwp, mode, proj)
    gaps.append(_errors((op, gp), want, mode))
    # A NaN in a nudged eager run (a gradient through a singular point) is an infinite gap that
    # tells nothing: skipped, so it cannot excuse any error.
    return {k: max([g[k] for g in gaps if math.isfinite(g.get(k, math.inf))] or [0.0]) for k in gaps[0]}


def _one(arch: str, mode: str) -> dict:
    """Runs one (architecture, mode) in this process; returns the row."""
    import torch

    import updraft
    from updraft import CompilerConfig, get_backend

    torch.set_num_threads(2)
    row = {"model": arch, "mode": mode}
    kind, f64 = mode.removesuffix("64"), mode.endswith("64")
    try:
        model, kw = _build(arch)
        if f64:
            model, kw = model.double(), _to_f64(kw)
        model.train(kind == "train")
        outs, grads, proj = _run(model, model, kw, kind)
        want = (outs, grads)
    except Exception as exc:  # noqa: BLE001 - the installed transformers cannot run it
        return {**row, "status": "skip", "why": f"eager: {type(exc).__name__}: {str(exc)[:200]}"}
    if not all(o.isfinite().all() for o in outs):  # (CANINE in f64): nothing to compare with
        return {**row, "status": "skip", "why": "eager's outputs hold NaN or inf"}
    if f64 and _computes_f32(model, kw, kind, proj):
        row["f32_inside"] = True  # judged as an f32 row
        f64 = False
    noise = _noise(model, kw, kind, proj, want, f64)
    tol = TOL64 if f64 else TOL
    backend = get_backend(CompilerConfig(inference="engine", training="engine"))
    compiled = torch.compile(model, backend=backend)
    start = time.perf_counter()
    try:
        outs, grads, _ = _run(compiled, model, kw, kind, proj)
    except Exception as exc:  # noqa: BLE001 - reported as a failure
        return {**row, "status": "FAIL", "why": f"compiled: {type(exc).__name__}: {str(exc)[:300]}"}
    row["compile_s"] = round(time.perf_counter() - start, 1)
    rep = updraft.last_report()
    row["coverage"] = round(rep.coverage, 3) if rep is not None else None
    if [o.shape for o in outs] != [o.shape for o in want[0]]:
        return {**row, "status": "FAIL", "why": "float outputs differ in number or shape from eager's"}
    if [_strides(o) for o in outs] != [_strides(o) for o in want[0]]:  # a user's .view() sees them
        return {**row, "status": "FAIL", "why": "float outputs differ in strides from eager's"}
    errs = _errors((outs, grads), want, kind)
    limit = {k: max(tol, NOISE_FACTOR * noise.get(k, 0.0)) for k in errs}
    worst = max(errs, key=lambda k: errs[k] / limit[k])
    row.update(worst=worst, err=errs[worst], limit=limit[worst], eager_gap=noise.get(worst))
    row["status"] = "ok" if all(e <= limit[k] for k, e in errs.items()) else "FAIL"
    if row["status"] == "ok" and any(e > tol for e in errs.values()):
        row["status"] = "noisy"  # passed, but only within eager's own sensitivity
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS + TV_MODELS))
    parser.add_argument("--modes", default="infer,train,train64")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(_one(*args.one)), flush=True)
        return 0
    pairs = [(arch, mode) for arch in args.models.split(",") for mode in args.modes.split(",")]
    rows = run_rows(__file__, pairs, "mode", args.timeout)
    return finish(rows, args.json, ("ok", "noisy", "FAIL", "skip"))


def run_rows(script: str, pairs: list, key: str, timeout: float) -> list:
    """Runs `script --one MODEL X` in a fresh process per (MODEL, X) pair, X being the row's
    `key` (a mode, a cache kind); the row is the process's last `ROW {json}` line, or a failure
    saying why there is none. Prints each row as it comes."""
    rows = []
    for arch, second in pairs:
        cmd = [sys.executable, os.path.abspath(script), "--one", arch, second]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
            row = json.loads(line[-1][4:]) if line else {
                "model": arch, key: second, "status": "FAIL",
                "why": f"process exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
        except subprocess.TimeoutExpired:
            row = {"model": arch, key: second, "status": "FAIL", "why": f"timeout {timeout} s"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def finish(rows: list, json_path, statuses: tuple) -> int:
    """Writes the rows (json_path, if given), prints the count per status; 1 if any failed."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    counts = {k: sum(r["status"] == k for r in rows) for k in statuses}
    print(f"{len(rows)} rows: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
