"""Accuracy and speed of CompilerConfig.weight_dtype (and activation_dtype) on the issue's 156M Llama
(docs/quantization.md, docs/BENCHMARKS.md "Issue 20: weight precision").

    python tools/weight_precision.py accuracy            # logit error, token agreement vs f32 (256 tokens)
    python tools/weight_precision.py speed --threads 2   # decode ms/token, prompt ms (interleaved repeats)
    python tools/weight_precision.py accuracy --variants f32 int8 int8_act   # int8 activations too

Random weights (torch.manual_seed(0)), batch 1, a 32-token prompt, greedy `generate` with
`model.forward = torch.compile(model.forward, backend=...)`, as in the issue.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch

import updraft
from updraft import CompilerConfig
from updraft.config import WEIGHT_DTYPES

# Each variant's CompilerConfig options: every weight_dtype, and the integer ones with int8
# activations too ("int8_act", "int4_act").
VARIANTS = {**{wd: {"weight_dtype": wd} for wd in WEIGHT_DTYPES},
            **{f"{wd}_act": {"weight_dtype": wd, "activation_dtype": "int8"} for wd in ("int8", "int4")}}


def make_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=4, vocab_size=32000)
    return LlamaForCausalLM(cfg).eval()


def compiled(variant: str, threads: int):
    model = make_model()
    # recompile_limit: the speed mode holds several compiled models of one forward at once.
    cfg = CompilerConfig(**VARIANTS[variant], num_threads=threads, recompile_limit=64)
    model.forward = torch.compile(model.forward, backend=updraft.get_backend(cfg))
    return model


def prompt_ids(n=32):
    return torch.randint(0, 32000, (1, n), generator=torch.Generator().manual_seed(1))


def accuracy(args):
    args.variants = ["f32"] + [v for v in args.variants if v != "f32"]  # f32 is the reference
    torch.set_num_threads(args.threads)
    prompt = prompt_ids()
    seqs, logits = {}, {}
    for wd in args.variants:
        torch._dynamo.reset()
        m = compiled(wd, args.threads)
        with torch.no_grad():
            seqs[wd] = m.generate(prompt, max_new_tokens=args.tokens, do_sample=False, min_new_tokens=args.tokens)
        del m
        gc.collect()
    # Teacher-forced logits over f32's sequence: every position sees the same context.
    full = seqs["f32"]
    for wd in args.variants:
        torch._dynamo.reset()
        m = make_model()
        fwd = torch.compile(m, backend=updraft.get_backend(CompilerConfig(**VARIANTS[wd], num_threads=args.threads)))
        with torch.no_grad():
            logits[wd] = fwd(full, use_cache=False).logits[0, prompt.shape[1] - 1:-1]
        del m, fwd
        gc.collect()
    ref = logits["f32"]
    scale = ref.abs().amax(dim=-1, keepdim=True)  # per position: relative to its largest |logit|
    print(f"156M Llama, {args.tokens} greedy tokens after a {prompt.shape[1]}-token prompt, vs the f32 engine")
    print("| variant | max rel. logit error | mean rel. logit error | top-1 agreement (teacher-forced) "
          "| greedy tokens equal | first differing token |")
    print("|---|---|---|---|---|---|")
    for wd in [v for v in args.variants if v != "f32"]:
        rel = (logits[wd] - ref).abs() / scale
        top1 = (logits[wd].argmax(-1) == ref.argmax(-1)).float().mean().item()
        gen, want = seqs[wd][0, prompt.shape[1]:], full[0, prompt.shape[1]:]
        eq = (gen == want)
        first = int((~eq).nonzero()[0]) if not bool(eq.all()) else len(eq)
        print(f"| {wd} | {rel.max().item():.4f} | {rel.mean().item():.5f} | {100 * top1:.1f}% "
              f"| {100 * eq.float().mean().item():.1f}% | {first} |")


def speed(args):
    torch.set_num_threads(args.threads)
    prompt = prompt_ids()
    models = {}
    # Three compiled models share LlamaForCausalLM.forward's code object: room for all their graphs.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    for wd in args.variants:
        models[wd] = compiled(wd, args.threads)
        with torch.no_grad():  # warm-up: compiles and plans for prefill and decode
            models[wd].generate(prompt, max_new_tokens=4, do_sample=False, min_new_tokens=4)
    times = {wd: {"prompt": [], "decode": []} for wd in args.variants}
    for _ in range(args.repeats):
        for wd in args.variants:  # interleaved, so drifts in the machine's load hit every dtype alike
            m = models[wd]
            with torch.no_grad():
                t0 = time.perf_counter()
                m.generate(prompt, max_new_tokens=1, do_sample=False)
                t1 = time.perf_counter()
                m.generate(prompt, max_new_tokens=args.new + 1, do_sample=False, min_new_tokens=args.new + 1)
                t2 = time.perf_counter()
            times[wd]["prompt"].append((t1 - t0) * 1e3)
            times[wd]["decode"].append(((t2 - t1) - (t1 - t0)) * 1e3 / args.new)
    print(f"156M Llama, {args.threads} thread(s), {args.new} new tokens, medians of {args.repeats} interleaved repeats")
    print("| variant | decode ms/token (median, min-max) | prompt (32 tokens) ms |")
    print("|---|---|---|")
    for wd in args.variants:
        d, p = times[wd]["decode"], times[wd]["prompt"]
        print(f"| {wd} | {statistics.median(d):.1f} ({min(d):.1f}-{max(d):.1f}) | {statistics.median(p):.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("accuracy", "speed"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256, help="accuracy: greedy tokens generated")
    ap.add_argument("--new", type=int, default=64, help="speed: new tokens per generate")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                    help="which to run (accuracy adds f32, its reference)")
    args = ap.parse_args()
    accuracy(args) if args.mode == "accuracy" else speed(args)


if __name__ == "__main__":
    main()
