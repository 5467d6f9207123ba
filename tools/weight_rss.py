"""Peak RSS of one `generate` run of the 156M Llama (issue 20's model), eager or updraft, each in
a fresh process; and where an updraft run's memory sits (weights the engine holds).

    python tools/weight_rss.py                       # eager and updraft, 3 interleaved rounds
    python tools/weight_rss.py --modes updraft --rounds 1 --stages
    python tools/weight_rss.py --modes updraft --options '{"prepack_weights": false}'
    python tools/weight_rss.py --modes eager,updraft --rounds 1 --prompt-lens 32,48,80   # several prompt lengths
    python tools/weight_rss.py --modes eager,eager_backend,aot_eager,updraft   # torch.compile's own share
    python tools/weight_rss.py --modes updraft,updraft_int8_model,updraft_int4_model   # updraft.quantize_weights first

Each run: LlamaConfig(hidden 1024, intermediate 2816, 8 layers, 16 query / 4 key-value heads,
vocab 32000), torch.manual_seed(0), 2 threads, batch 1, a 32-token prompt, 64 new tokens,
greedy, `model.forward = torch.compile(model.forward, backend="updraft")`. Printed: VmHWM
(peak RSS) and VmRSS at the end, from /proc/self/status, and the serving peak: VmHWM restarted
once the model is built (and, for a `*_<dtype>_model` mode, quantised in place), so it leaves out
the f32 weights a quantised model held only while it was made; with --stages, VmRSS after building
the model, after the first generate and after the second, the second's time per token (prompt
included; a rough figure: benchmarks/ has the timing), and the report's engine weight bytes.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import suite  # noqa: E402  (reset_peak_rss)


def _status_gb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20  # kB -> GB
    return float("nan")


def child(mode: str, options: dict, stages: bool, lens: list[int]) -> None:
    import torch
    import transformers

    torch.set_num_threads(2)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, lens[0]))
    out: dict = {"mode": mode, "rss_model_gb": _status_gb("VmRSS")}
    if mode.endswith("_model"):  # e.g. updraft_int8_model: updraft.quantize_weights(model, "int8") first
        import updraft

        base, dtype = mode[:-len("_model")].rsplit("_", 1)
        out["quantized"] = str(updraft.quantize_weights(model, dtype)).splitlines()[0]
        mode = base
    # From here on the process serves: the peak it reaches is the serving peak (the load's peak,
    # f32 weights and their quantisation included, is kept apart as load_peak_gb).
    gc.collect()
    out["rss_ready_gb"] = _status_gb("VmRSS")
    out["load_peak_gb"] = _status_gb("VmHWM")
    suite.reset_peak_rss()
    if mode == "updraft":
        import updraft  # noqa: F401  (registers the backend)
        model.forward = torch.compile(model.forward, backend="updraft", options=options or None)
    elif mode in ("eager_backend", "aot_eager"):  # torch.compile's own share: Dynamo (+ AOTAutograd), no kernels
        model.forward = torch.compile(model.forward, backend=mode.replace("_backend", ""))
    with torch.no_grad():
        model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        out["rss_first_gb"] = _status_gb("VmRSS")
        for n in lens[1:]:  # serving: prompts of other lengths (Dynamo's dynamic prefill graph)
            model.generate(torch.randint(0, cfg.vocab_size, (1, n)), max_new_tokens=64, min_new_tokens=64,
                           do_sample=False)
            out[f"rss_after_{n}_gb"] = _status_gb("VmRSS")
        if stages:
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
            out["second_generate_ms_per_token"] = (time.perf_counter() - t0) * 1e3 / 64  # prompt included
            out["rss_second_gb"] = _status_gb("VmRSS")
    out["serving_peak_gb"] = _status_gb("VmHWM")
    out["peak_rss_gb"] = max(out["serving_peak_gb"], out["load_peak_gb"])
    out["rss_end_gb"] = _status_gb("VmRSS")
    if mode == "updraft" and stages:
        import updraft
        r = updraft.last_report()
        w = getattr(r, "weights", None)
        if w is not None:
            out["weights"] = w
    print("RESULT " + json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="eager,updraft")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--options", default="{}", help="CompilerConfig options for updraft, as JSON")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--prompt-lens", default="32",
                    help="comma-separated: the first generate's prompt length, then one generate per other length")
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        child(a.child, json.loads(a.options), a.stages, [int(n) for n in a.prompt_lens.split(",")])
        return
    peaks: dict = {}
    for _ in range(a.rounds):
        for mode in a.modes.split(","):
            cmd = [sys.executable, __file__, "--child", mode, "--options", a.options, "--prompt-lens", a.prompt_lens] + (
                ["--stages"] if a.stages else [])
            p = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                sys.exit(f"child {mode} failed:\n{p.stdout}\n{p.stderr}")
            r = json.loads(line[0][7:])
            print(json.dumps(r))
            peaks.setdefault(mode, []).append((r["peak_rss_gb"], r["serving_peak_gb"]))
    for mode, v in peaks.items():
        whole, serving = [p[0] for p in v], [p[1] for p in v]
        print(f"{mode}: peak RSS median {statistics.median(whole):.2f} GB, serving peak (after the model is "
              f"built{' and quantised' if mode.endswith('_model') else ''}) {statistics.median(serving):.2f} GB, "
              f"over {len(v)} fresh processes ({whole}; {serving})")


if __name__ == "__main__":
    main()
