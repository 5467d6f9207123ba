"""Host-side cost of one `generate()` decode step with updraft: where the microseconds go.

    python benchmarks/decode_overhead.py                      # both models, default guards
    python benchmarks/decode_overhead.py --models gpt2 --guards default skip_all nn_modules
    python benchmarks/decode_overhead.py --cache static       # transformers' static KV cache
    python benchmarks/decode_overhead.py --models llama --cache static --options '{"weight_dtype": "int8"}'
    python benchmarks/decode_overhead.py --models llama --quantize int8   # the model's own int8 weights

Models (random weights, `torch.manual_seed(0)`): "llama" is the 156M Llama of issue 20
(hidden 1024, intermediate 2816, 8 layers, 16/4 heads, vocab 32000); "gpt2" is GPT-2 small
(`GPT2LMHeadModel(GPT2Config())`, 124M). Batch 1, 32-token prompt, `--new-tokens` greedy tokens,
`model.forward = torch.compile(model.forward, backend="updraft", dynamic=..., options=...)`.

Per decode step (the prefill step is left out) the script times, with perf_counter_ns hooks it
installs in this process only:
  step      between two calls of a LogitsProcessor: the whole generate() iteration
  forward   the compiled `model.forward` call (Dynamo's frame hook and guards, AOTAutograd's
            runtime wrapper, the compiled graphs, transformers' code outside them)
  graph     inside the callables updraft's inference compiler returned (the partitioned graphs)
  partition inside EnginePartition.forward (updraft's call path + the engine)
  engine    inside the engine's entry points (PlannedCall.run, Executable.run/prepare/planned;
            prepare/planned are also shown apart: they are plan lookups, not compute)
and derives: transformers = step - forward; dynamo+aot = forward - graph; torch-ops = graph -
partition (PyTorch ops the outer graph runs between partitions); updraft-py = partition - engine.
Guard evaluation alone is the difference of `forward` between --guards default and skip_all
(skip_all_guards_unsafe: measurement only, never a setting to serve with).

Timings on a shared machine are noisy: each row is the median over steps of the median over
`--runs` generations, and rows of one model run interleaved in one process.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "python"))  # after PYTHONPATH: an A/B run can point at another tree

import torch  # noqa: E402

GUARD_FILTERS = {
    "default": None,
    "nn_modules": "skip_guard_on_all_nn_modules_unsafe",
    "tensors": "keep_tensor_guards_unsafe",
    "skip_all": "skip_all_guards_unsafe",
}


def build_model(name: str):
    import transformers
    torch.manual_seed(0)
    if name == "llama":
        cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                       num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
        model = transformers.LlamaForCausalLM(cfg)
    elif name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    else:
        raise SystemExit(f"[decode_overhead] unknown model {name!r}; use llama or gpt2")
    return model.eval()


class Timers:
    """Per-call durations (ns) of the hooked functions, grouped per decode step."""

    def __init__(self) -> None:
        self.acc = {k: 0 for k in ("forward", "graph", "partition", "engine", "lookup")}
        self.calls = {k: 0 for k in self.acc}
        self.steps: list[dict] = []
        self.stamps: list[int] = []

    def wrap(self, key: str, fn):
        acc, calls, clock = self.acc, self.calls, time.perf_counter_ns

        def timed(*a, **kw):
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                acc[key] += clock() - t0
                calls[key] += 1
        return timed

    def stamp(self) -> None:
        self.stamps.append(time.perf_counter_ns())
        self.steps.append(dict(self.acc, **{"n_" + k: v for k, v in self.calls.items()}))
        for k in self.acc:
            self.acc[k] = 0
            self.calls[k] = 0


def install_hooks(timers: Timers) -> None:
    """Times updraft's compiled graphs, partitions and engine entry points (this process only)."""
    from updraft import _C, backend, engine_partition

    ci = backend.compile_inference

    def compile_inference(*a, **kw):
        compiled = ci(*a, **kw)
        timed = timers.wrap("graph", compiled)
        if getattr(compiled, "_boxed_call", False):
            timed._boxed_call = True
        return timed
    backend.compile_inference = compile_inference
    engine_partition.EnginePartition.forward = timers.wrap("partition", engine_partition.EnginePartition.forward)
    _C.PlannedCall.run = timers.wrap("engine", _C.PlannedCall.run)
    _C.Executable.run = timers.wrap("engine", _C.Executable.run)
    for name in ("prepare", "planned"):
        inner = timers.wrap("lookup", getattr(_C.Executable, name))
        setattr(_C.Executable, name, timers.wrap("engine", inner))


def run(model_name: str, guards: list[str], cache: str, dynamic, new_tokens: int, runs: int,
        threads: int, options: dict, quantize: str | None = None) -> list[dict]:
    import transformers
    import updraft  # noqa: F401  (registers the backend)

    torch.set_num_threads(threads)
    timers = Timers()
    install_hooks(timers)
    base = build_model(model_name)
    vocab = base.config.vocab_size
    prompt = torch.randint(3, vocab, (1, 32), generator=torch.Generator().manual_seed(1))

    class Stamp(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            timers.stamp()
            return scores

    models = {}
    weights = base.state_dict()  # f32, before any quantize_weights below replaces base's layers
    for g in guards:
        # One model object per guard setting: each has its own compiled forward (Dynamo caches
        # per code object, so the settings would share a cache entry list on one model).
        m = build_model(model_name) if g != guards[0] else base
        m.load_state_dict(weights)
        if quantize:  # the model's own weights compact (updraft.quantize_weights)
            import updraft

            updraft.quantize_weights(m, quantize)
        opts = dict(options)
        if GUARD_FILTERS[g]:
            opts["guard_filter_fn"] = getattr(torch.compiler, GUARD_FILTERS[g])
        compiled = torch.compile(m.forward, backend="updraft", dynamic=dynamic, options=opts or None)
        m.forward = timers.wrap("forward", compiled)
        models[g] = m
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 8 * len(guards))

    def generate(m):
        timers.stamps.clear()
        timers.steps.clear()
        # No end-of-sequence token (as benchmarks/llm.py): every run is new_tokens long without
        # min_new_tokens, whose processors and stopping check call torch.isin three times a step
        # (0.58 ms a step under cProfile in session 49, counted in the "transformers" column).
        m.generation_config.eos_token_id = None
        kw = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                  logits_processor=transformers.LogitsProcessorList([Stamp()]))
        if cache == "static":
            kw["cache_implementation"] = "static"
        with torch.no_grad():
            out = m.generate(prompt, attention_mask=torch.ones_like(prompt), **kw)
        # steps[i] holds what ran before stamp i: [0] the prefill, [1:] one decode step each.
        per = []
        for i in range(1, len(timers.stamps)):
            s = timers.steps[i]
            s["step"] = timers.stamps[i] - timers.stamps[i - 1]
            per.append(s)
        return out, per

    ref = None
    for g in guards:  # warm-up: the compiles
        out, _ = generate(models[g])
        if ref is None:
            ref = out
        elif not torch.equal(out, ref):
            print(f"[decode_overhead] {model_name} guards={g}: tokens differ from guards={guards[0]}", file=sys.stderr)
    samples = {g: [] for g in guards}
    for _ in range(runs):
        for g in guards:  # interleaved
            samples[g].append(generate(models[g])[1])
    rows = []
    for g in guards:
        def med(key):
            return statistics.median(statistics.median(s[key] for s in run_) for run_ in samples[g]) / 1e3
        r = {k: med(k) for k in ("step", "forward", "graph", "partition", "engine", "lookup")}
        r.update(model=model_name, guards=g, cache=cache,
                 graphs=samples[g][0][-1]["n_graph"], partitions=samples[g][0][-1]["n_partition"])
        rows.append(r)
    return rows


def table(rows: list[dict]) -> str:
    head = ("| model | cache | guards | step | transformers | dynamo+aot | torch ops | updraft py "
            "| (plan lookups) | engine | graphs/partitions per step |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['cache']} | {r['guards']} | {r['step']:.0f} | {r['step'] - r['forward']:.0f} "
            f"| {r['forward'] - r['graph']:.0f} | {r['graph'] - r['partition']:.0f} "
            f"| {r['partition'] - r['engine'] + r['lookup']:.0f} | {r['lookup']:.0f} "
            f"| {r['engine'] - r['lookup']:.0f} | {r['graphs']}/{r['partitions']} |")
    return "\n".join(lines)


def main() -> None:
    from updraft.quantize import DTYPES  # the dtypes quantize_weights stores a model's weights in

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama", "gpt2"])
    ap.add_argument("--guards", nargs="+", default=["default", "skip_all"], choices=list(GUARD_FILTERS))
    ap.add_argument("--cache", default="dynamic", choices=["dynamic", "static"])
    ap.add_argument("--dynamic", default=None, choices=[None, "true", "false"],
                    help="torch.compile(dynamic=...): default None (Dynamo marks what changes)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quantize", choices=DTYPES,
                    help="updraft.quantize_weights(model, QUANTIZE) before compiling")
    ap.add_argument("--options", type=json.loads, default={},
                    help='CompilerConfig options as JSON, e.g. \'{"weight_dtype": "int8"}\'')
    a = ap.parse_args()
    dynamic = {None: None, "true": True, "false": False}[a.dynamic]
    rows = []
    for m in a.models:
        rows += run(m, a.guards, a.cache, dynamic, a.new_tokens, a.runs, a.threads, a.options, a.quantize)
    print("per decode step, microseconds (median); updraft py includes the plan lookups")
    print(table(rows))


if __name__ == "__main__":
    main()
