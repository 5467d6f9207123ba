"""A decoder family's generate() with range plans on (1) or off (0): ms per token over three
generations of 64, 96 and 128 new tokens (new cache lengths each time) after a warm-up, and the
plans the engine built. The model is the family's default config at hidden 256, 4 layers,
vocabulary 4096 (random weights), 2 threads.

    python tools/range_plans_ab.py ARCH 1|0      # e.g. gemma2 1, then gemma2 0; alternate runs
"""
import sys, time, torch, statistics
import transformers, updraft
from updraft import CompilerConfig, get_backend
torch.set_num_threads(2)
arch, rp = sys.argv[1], sys.argv[2] == "1"
torch.manual_seed(0)
cfg = transformers.AutoConfig.for_model(arch)
for k, v in dict(hidden_size=256, n_layer=4, num_hidden_layers=4, n_head=8, num_attention_heads=8, num_key_value_heads=4, intermediate_size=1024, vocab_size=4096, head_dim=32, use_cache=True, pad_token_id=0).items():
    if hasattr(cfg, k): setattr(cfg, k, v)
m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
m.forward = torch.compile(m.forward, backend=get_backend(CompilerConfig(range_plans=rp)))
ids = torch.randint(3, 4096, (1, 16))
def gen(n):
    with torch.no_grad():
        t = time.perf_counter(); m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0); return time.perf_counter() - t
gen(8)  # compiles
ts = []
for n in (64, 96, 128):  # new cache lengths each time
    ts.append((gen(n) - 0) / n * 1e3)
rep = updraft.last_report()
print(f"{arch} range_plans={rp}: ms/token over 64/96/128-token generations {', '.join(f'{t:.2f}' for t in ts)}; plans built {rep.plans_built}")
