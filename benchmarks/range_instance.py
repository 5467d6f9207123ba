"""What a new KV length costs the decode partition: the range plan's instance and its first run.

    PYTHONPATH=<tree>/python python benchmarks/range_instance.py [--width 256] [--threads 1] [--rounds 10]

Builds an 8-layer Llama-architecture model of the given width from a config (random weights,
seed 0), compiles its forward with updraft and runs `generate()` (greedy, dynamic KV cache, 32-token
prompt, 40 new tokens). Then, on the decode partition (the engine graph whose bound signatures
grow by one cache position per token), for 19 fresh cache lengths past the last one and
`--rounds` times over: `Executable.planned` for the new signature (an instance of the bucket's
range plan), then two runs of the bound call on zero inputs. Prints the medians of planned() and
of the first run minus the second (what the first run's call state costs). For A/B runs of two
trees, alternate processes. Reads the partition's bound calls (EnginePartition internals), so it
follows them when they change.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch


def decode_state(engine_partition):
    """The built state of the partition whose bound signatures grew (the decode graph)."""
    for o in gc.get_objects():
        try:
            if type(o) is not engine_partition:
                continue
        except ReferenceError:
            continue
        st = o._one if o._by_set is None else next(iter(o._by_set.values()), None)
        if st is not None and not isinstance(st, str) and len(st.calls) >= 2:
            return st
    raise SystemExit("[range_instance] no decode partition with two bound signatures found")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    import transformers

    from updraft.engine_partition import EnginePartition

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg = transformers.LlamaConfig(hidden_size=args.width, intermediate_size=2 * args.width, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.forward = torch.compile(model.forward, backend="updraft")
    with torch.no_grad():
        model.generate(torch.randint(0, 32000, (1, 32)), max_new_tokens=40, min_new_tokens=40, do_sample=False)
    st = decode_state(EnginePartition)
    keys = list(st.calls)
    a, b, n = keys[-2], keys[-1], len(st.runtime_pos)
    planned, first_extra = [], []
    for _ in range(args.rounds):
        for step in range(1, 20):  # lengths past the last bound one: each a new instance
            sig = [[yy + step * (yy - xx) for xx, yy in zip(x, y)] for x, y in zip(a[:n], b[:n])]
            t = time.perf_counter()
            call = st.cg.planned(sig)
            planned.append(time.perf_counter() - t)
            ins = [torch.zeros(s, dtype=dt) for s, dt in zip(sig, st.in_dtypes)]
            outs = [torch.empty(tuple(s), dtype=d) for s, d in zip(call.output_shapes, st.out_dtypes)]
            ptrs, optrs = [x.data_ptr() for x in ins], [o.data_ptr() for o in outs]
            runs = []
            for _ in range(2):
                t = time.perf_counter()
                call.run(ptrs, optrs, [])
                runs.append(time.perf_counter() - t)
            first_extra.append(runs[0] - runs[1])
    print(f"decode partition, {n} runtime inputs, width {args.width}, {args.threads} thread(s): "
          f"planned() {statistics.median(planned) * 1e6:.0f} us, first run minus second "
          f"{statistics.median(first_extra) * 1e6:.0f} us (medians of {len(planned)})")


if __name__ == "__main__":
    main()
