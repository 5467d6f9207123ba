"""Per-new-shape plan build time and steady-state latency for BERT-base with dynamic shapes.

    PYTHONPATH=python python benchmarks/plan_build.py [--batch 2] [--steady-iters 20]

Compiles BertModel(BertConfig()) (random weights) with dynamic=True, calls it once per
sequence length (20 lengths, 8 to 512), and reads the report's plan_ms after each call: its
increase is the Plan::build time of that new shape signature (wall clock). Where the engine
has it, the Executable's total_plan_cpu_ms gives the same per shape as the building
thread's CPU time, which waiting for a core on a busy machine does not inflate. Also checks each output against
eager (max abs diff) and times the compiled model at seq 128 (median of --steady-iters calls).
Times are wall clock on whatever else the machine runs: quote them with that caveat.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import updraft
from updraft import _C

LENGTHS = [8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steady-iters", type=int, default=20)
    ap.add_argument("--lengths", type=int, nargs="*", default=LENGTHS)
    args = ap.parse_args()
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).eval()
    graphs = []
    real = _C.compile

    def spy(graph, options=None):  # keeps the Executable for its plan statistics
        graphs.append(real(graph, options if options is not None else {}))
        return graphs[-1]

    _C.compile = spy
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    per_shape, per_shape_cpu, worst = [], [], 0.0
    with torch.no_grad():
        # First call: Dynamo + engine compile (+ the first plan, not counted). Its length must
        # differ from the batch: Dynamo gives equal sizes one symbol ("duck sizing"), so a
        # first call of [8, 8] compiles a graph for batch == seq and the next length recompiles.
        first = next(n for n in args.lengths if n != args.batch)
        ids = torch.randint(0, model.config.vocab_size, (args.batch, first))
        compiled(ids)
        compiles = len(graphs)
        prev = updraft.last_report().partitions[0].plan_ms
        cpu = lambda: getattr(graphs[-1], "total_plan_cpu_ms", float("nan"))  # noqa: E731
        prev_cpu = cpu()
        for seq in [n for n in args.lengths if n != first]:
            ids = torch.randint(0, model.config.vocab_size, (args.batch, seq))
            out = compiled(ids).last_hidden_state
            worst = max(worst, (out - model(ids).last_hidden_state).abs().max().item())
            ms = updraft.last_report().partitions[0].plan_ms
            per_shape.append(ms - prev)
            per_shape_cpu.append(cpu() - prev_cpu)
            prev, prev_cpu = ms, cpu()
        ids = torch.randint(0, model.config.vocab_size, (args.batch, 128))
        compiled(ids)
        times = []
        for _ in range(args.steady_iters):
            t0 = time.perf_counter()
            compiled(ids)
            times.append((time.perf_counter() - t0) * 1e3)
    rep = updraft.last_report()
    print(f"plans built: {rep.plans_built}, engine compiles: {len(graphs)}"
          + ("" if len(graphs) == compiles else " (a recompile after the first call: the figures mix graphs)"))
    print("per-new-shape plan ms: " + " ".join(f"{x:.2f}" for x in per_shape))
    print(f"plan build per new shape: median {statistics.median(per_shape):.3f} ms, max {max(per_shape):.3f} ms "
          f"(over {len(per_shape)} new lengths, batch {args.batch})")
    print(f"plan build CPU time per new shape: median {statistics.median(per_shape_cpu):.3f} ms, "
          f"max {max(per_shape_cpu):.3f} ms")
    kc = getattr(graphs[-1], "kernels_created", None)
    if kc is not None:
        print(f"kernels created {kc}, reused {graphs[-1].kernels_reused}")
    print(f"max |compiled - eager| over all lengths: {worst:.2e}")
    print(f"steady state seq 128 batch {args.batch}: median {statistics.median(times):.2f} ms "
          f"(min {min(times):.2f}) over {len(times)} calls")


if __name__ == "__main__":
    main()
