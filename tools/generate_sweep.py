"""Sweeps decoder families that no issue names through transformers' `generate()` with an
updraft-compiled forward, against eager.

Each family is built from its default config (`AutoConfig.for_model`) shrunk as
tools/model_sweep.py shrinks it (two layers of width 64, vocabulary 512) with the KV cache on,
random weights, eval mode; a left-padded batch of two prompts (the second row's first 4 positions are padding) runs
greedy `generate` for NEW tokens eagerly and then with `model.forward = torch.compile(
model.forward, backend="updraft")`, in a fresh process per (family, cache) row, once with
transformers' default dynamic cache and once with the static cache. A row is:
- `ok`: the same tokens as eager and every step's scores within RTOL and ATOL_SCALE * max|eager
  score| (tests/python/test_generate.py gives the reason for the tolerance);
- `FAIL`: other tokens, scores outside the tolerance, an exception from the compiled run, or a
  partition that failed to compile (the report's failed partitions; updraft's warnings are
  listed in the row either way);
- `skip`: the installed transformers cannot build the family or run it eagerly with that cache
  (not updraft's doing).
Each row also records the engine compiles, the share of compute ops in the engine, the ops left
to PyTorch, and the plans built per token by a second generation twice as long as the first
(new cache lengths: near 0 where range plans serve them, about 1 where each length needs a
plan of its own).

    python tools/generate_sweep.py [--models llama,qwen3,...] [--caches dynamic,static] [--json F]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sweep  # noqa: E402 - the shrunk configs and the row runner

NEW = 12
RTOL = 1e-4
ATOL_SCALE = 1e-4
PAD, BOS, EOS = 0, 1, 2

# Decoder-only families of the installed transformers, beyond test_generate.py's seven (Llama,
# Qwen2, Mistral, GPT-2, OPT, Phi-3, Gemma): q/k norms, logit soft-capping, alternating
# sliding-window layers, partial rotary, parallel attention + MLP blocks, alibi, learned and
# absolute positions, mixture-of-experts routing, bias-free layer norms.
DEFAULT_MODELS = [
    "qwen3", "qwen3_moe", "qwen2_moe", "gemma2", "gemma3_text", "phi", "falcon", "gpt_neox", "gptj",
    "gpt_neo", "bloom", "stablelm", "starcoder2", "olmo", "olmo2", "cohere", "cohere2", "granite",
    "granitemoe", "helium", "glm", "glm4", "smollm3", "mixtral", "codegen", "biogpt", "xglm",
    "persimmon", "nemotron", "arcee", "olmoe", "jetmoe", "exaone4", "ernie4_5", "seed_oss", "apertus",
    "gpt_bigcode", "mpt",
]


def _build(arch):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = model_sweep._shrink(AutoConfig.for_model(arch))
    # use_cache: decode with a KV cache, as a server runs it (MPT's config says False, which makes
    # every step a forward over the whole sequence).
    for key, value in dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, use_cache=True).items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval()


def _prompts():
    import torch

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 512, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :4], mask[1, :4] = PAD, 0
    return ids, mask


def _generate(model, ids, mask, cache, new=NEW):
    import torch

    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, output_scores=True,
              return_dict_in_generate=True, pad_token_id=PAD)
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, **kw)


def _score_error(got, want) -> float:
    """The largest |got - want| / (ATOL_SCALE * max|want| + RTOL * |want|) over every step's
    scores: above 1 fails. -inf where eager has -inf is equal; elsewhere an infinite error."""
    import torch

    worst = 0.0
    for g, w in zip(got.scores, want.scores):
        fin = torch.isfinite(w)
        if not torch.equal(fin, torch.isfinite(g)) or not torch.equal(g[~fin], w[~fin]):
            return float("inf")
        tol = ATOL_SCALE * float(w[fin].abs().max()) + RTOL * w[fin].abs()
        worst = max(worst, float(((g[fin] - w[fin]).abs() / tol).max()))
    return worst


def _one(arch: str, cache: str) -> dict:
    import torch

    import updraft  # noqa: F401 - registers the backend
    from updraft.report import Report, set_collector

    torch.set_num_threads(2)
    row = {"model": arch, "cache": cache}
    try:
        model = _build(arch)
        ids, mask = _prompts()
        want = _generate(model, ids, mask, cache)
        want_long = _generate(model, ids, mask, cache, 2 * NEW)
    except Exception as exc:  # noqa: BLE001 - the installed transformers cannot run it
        return {**row, "status": "skip", "why": f"eager: {type(exc).__name__}: {str(exc)[:200]}"}
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="updraft")
    rep = Report()
    set_collector(rep)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _generate(model, ids, mask, cache)
            built = rep.plans_built
            longer = _generate(model, ids, mask, cache, 2 * NEW)  # new lengths: plans per token
    except Exception as exc:  # noqa: BLE001 - reported as a failure
        return {**row, "status": "FAIL", "why": f"compiled: {type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        set_collector(None)
    fallback = collections.Counter()
    for g in rep.graphs:
        fallback.update(g.fallback_ops)
    row.update(tokens_equal=bool(torch.equal(got.sequences, want.sequences)
                                 and torch.equal(longer.sequences, want_long.sequences)),
               score_err=round(_score_error(got, want), 3), engine_compiles=rep.engine_compiles,
               graphs=len(rep.graphs), coverage=round(rep.coverage, 3),
               plans_per_token=round((rep.plans_built - built) / (2 * NEW), 2),
               fallback=dict(fallback), failed=[str(p) for p in rep.failed_partitions][:2],
               warnings=sorted({str(w.message)[:200] for w in caught if "updraft" in str(w.message)})[:3])
    ok = row["tokens_equal"] and row["score_err"] <= 1.0 and not rep.failed_partitions
    row["status"] = "ok" if ok else "FAIL"
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--caches", default="dynamic,static")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(_one(*args.one)), flush=True)
        return 0
    pairs = [(arch, cache) for arch in args.models.split(",") for cache in args.caches.split(",")]
    rows = model_sweep.run_rows(__file__, pairs, "cache", args.timeout)
    return model_sweep.finish(rows, args.json, ("ok", "FAIL", "skip"))


if __name__ == "__main__":
    sys.exit(main())
