"""A decoder family's generate() with range plans on (1) or off (0): ms per new token (the whole
generation's time over its new tokens) for three generations of 64, 96 and 128 new tokens after
a warm-up, each reaching cache lengths the ones before did not, and the plans the engine built.
The model is the family's default config at hidden 256, 4 layers, vocabulary 4096 (random
weights), 2 threads.

    python tools/range_plans_ab.py ARCH 1|0      # e.g. gemma2 1, then gemma2 0; alternate runs
"""
from __future__ import annotations

import sys
import time

import torch
import transformers

import updraft
from updraft import CompilerConfig, get_backend

SMALL = dict(hidden_size=256, n_layer=4, num_hidden_layers=4, n_head=8, num_attention_heads=8,
             num_key_value_heads=4, intermediate_size=1024, vocab_size=4096, head_dim=32, use_cache=True,
             pad_token_id=0)


def main() -> None:
    arch, range_plans = sys.argv[1], sys.argv[2] == "1"
    torch.set_num_threads(2)
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(arch)
    for key, value in SMALL.items():
        if hasattr(cfg, key):
            setattr(cfg, key, value)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.forward = torch.compile(model.forward, backend=get_backend(CompilerConfig(range_plans=range_plans)))
    ids = torch.randint(3, 4096, (1, 16))

    def ms_per_token(new: int) -> float:
        with torch.no_grad():
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
            return (time.perf_counter() - t) / new * 1e3

    ms_per_token(8)  # the compiles
    ts = [ms_per_token(n) for n in (64, 96, 128)]
    print(f"{arch} range_plans={range_plans}: ms/token over 64/96/128-token generations "
          f"{', '.join(f'{t:.2f}' for t in ts)}; plans built {updraft.last_report().plans_built}")


if __name__ == "__main__":
    main()
