"""Plan builds per generated token with and without range plans (CompilerConfig.range_plans).

    PYTHONPATH=python python benchmarks/decode_plans.py [--model 156m|small] [--new-tokens 64] [--rounds 3]

Builds a Llama-architecture model from a config (random weights, seed 0), compiles its forward
with updraft twice (range_plans on / off, each in a fresh Dynamo state), and runs `generate()`
(greedy, dynamic KV cache, batch 1, 32-token prompt) `--rounds` times per setting, interleaved.
Prints per setting: plans built and instantiated in the first and in later generations, the
building thread's CPU milliseconds of plan builds per generation (waiting for a core does not
count), and decode ms/token (median and min-max over the later rounds; wall clock on whatever
else the machine runs). Tokens are checked against eager.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import updraft
from updraft.report import Report, set_collector

MODELS = {
    "156m": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32000),
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000),
}


def _model(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**MODELS[name])).eval()


def _totals(rep: Report) -> tuple:
    return (sum(p.plans_built for p in rep.partitions), sum(p.plans_instantiated for p in rep.partitions),
            sum(p.plan_cpu_ms for p in rep.partitions))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="small")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    prompt = torch.randint(0, MODELS[args.model]["vocab_size"], (1, 32), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = _model(args.model).generate(prompt, **kw)
    runs = {}
    for setting in (True, False):
        torch._dynamo.reset()
        model = _model(args.model)
        model.forward = torch.compile(model.forward, backend="updraft", options={"range_plans": setting})
        rep = Report()
        set_collector(rep)
        rows = []
        try:
            for _ in range(args.rounds):
                before = _totals(rep)
                t0 = time.perf_counter()
                with torch.no_grad():
                    got = model.generate(prompt, **kw)
                wall = time.perf_counter() - t0
                after = _totals(rep)
                rows.append((after[0] - before[0], after[1] - before[1], after[2] - before[2],
                             wall / args.new_tokens * 1e3, bool(torch.equal(got, want))))
        finally:
            set_collector(None)
        runs[setting] = rows
    print(f"model {args.model}, {args.new_tokens} new tokens, prompt 32, {torch.get_num_threads()} threads")
    print(f"{'range_plans':<12} {'round':<6} {'built':>6} {'instances':>10} {'plan CPU ms':>12} {'ms/token':>9}  tokens")
    for setting, rows in runs.items():
        for i, (built, inst, cpu, ms, same) in enumerate(rows):
            print(f"{str(setting):<12} {i:<6} {built:>6} {inst:>10} {cpu:>12.1f} {ms:>9.2f}  {'= eager' if same else 'DIFFER'}")
        later = [r[3] for r in rows[1:]] or [rows[0][3]]
        print(f"{str(setting):<12} later rounds: {statistics.median(later):.2f} ms/token "
              f"({min(later):.2f}-{max(later):.2f})")


if __name__ == "__main__":
    main()
