"""First call in a fresh process: torch's precompile (updraft/precompile.py) vs torch.compile.

    PYTHONPATH=python python benchmarks/precompile_first_call.py               # BERT-base, 3 runs each
    PYTHONPATH=python python benchmarks/precompile_first_call.py --model mlp --runs 5

One process compiles the model with aot_compile and saves it. Then, `--runs` times each, in a
fresh process:
  precompile: torch.compiler.load_compiled_function, then the first call;
  torch.compile: torch.compile(model, backend="updraft"), then the first call (Dynamo, AOTAutograd,
  the engine's passes, the plan).
Reported separately, never inside the figures: importing torch and updraft, building the model
(the user's own weights), and importing torch._dynamo (both paths need it; torch's loader
imports it). "first call" includes binding the parameters, replaying the folds and building
the plan (its wall and CPU ms are shown apart). Process CPU time is shown beside wall time (all
threads: the engine runs on 2 by default): on a loaded machine it is the steadier figure.
Outputs are compared with eager (max abs diff) and with the saving process's call
(bit-identical). Medians, with `uptime`: the machine is shared, read the figures with the load
beside them. PRECOMPILE_GUARDS=inputs (default) | serializable | portable picks the guard filter
(docs/precompile.md, "Guards"). `--worker` is the per-process half.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_T0 = time.perf_counter()
import updraft  # noqa: E402  (before torch: its OpenMP wait policy, updraft/__init__.py)
import torch  # noqa: E402

_IMPORT_S = time.perf_counter() - _T0


class Wrap(torch.nn.Module):
    """torch pickles the traced function by name; transformers' forward is a decorated wrapper
    (not the object its name finds), so a one-line module of our own is the traced function."""

    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(ids).last_hidden_state


class MLP(torch.nn.Module):
    """zoo's MLP is an nn.Sequential, whose forward torch wraps in a closure it cannot pickle."""

    def __init__(self, seq: torch.nn.Module) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(seq)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _build(name: str):
    from updraft import zoo

    model, inputs = zoo.build(name)
    return (MLP(model) if name == "mlp" else Wrap(model)).eval(), inputs


def worker(mode: str, name: str, d: str) -> None:
    t_import = _IMPORT_S
    t0 = time.perf_counter()
    model, inputs = _build(name)
    t_model = time.perf_counter() - t0
    t0 = time.perf_counter()
    import torch._dynamo.aot_compile  # noqa: F401

    t_dynamo = time.perf_counter() - t0
    from updraft.precompile import input_guards, serializable_guards

    guards = {"serializable": serializable_guards, "portable": torch.compiler.keep_portable_guards_unsafe,
              "inputs": input_guards}[os.environ.get("PRECOMPILE_GUARDS", "inputs")]
    out: dict = {"import_s": t_import, "model_s": t_model, "dynamo_import_s": t_dynamo}
    path = os.path.join(d, "fn.bin")
    if mode == "save":
        with torch.no_grad():
            t0 = time.perf_counter()
            fn = torch.compile(model.forward, backend="updraft", fullgraph=True,
                               options={"guard_filter_fn": guards}).aot_compile((inputs, {}))
            out["aot_compile_s"] = time.perf_counter() - t0
            y = fn(model, *inputs)
        t0 = time.perf_counter()
        fn.save_compiled_function(path)
        out["save_s"] = time.perf_counter() - t0
        out["bytes"] = os.path.getsize(path)
        from updraft.precompile import PrecompiledGraph

        out["updraft_bytes"] = len(PrecompiledGraph.serialize_compile_artifacts(fn._artifacts.compiled_fn))
        torch.save(y, os.path.join(d, "out.pt"))
    else:
        with torch.no_grad():
            t0, c0 = time.perf_counter(), time.process_time()
            if mode == "load":
                with open(path, "rb") as f:
                    fn = torch.compiler.load_compiled_function(f)
                out["load_s"] = time.perf_counter() - t0
                t1, c1 = time.perf_counter(), time.process_time()
                y = fn(model, *inputs)
            else:
                fn = torch.compile(model, backend="updraft")
                out["load_s"] = time.perf_counter() - t0
                t1, c1 = time.perf_counter(), time.process_time()
                y = fn(*inputs)
            out["first_s"] = time.perf_counter() - t1
            out["load_cpu_s"], out["first_cpu_s"] = c1 - c0, time.process_time() - c1
            ref = model(*inputs)
            call = (lambda: fn(model, *inputs)) if mode == "load" else (lambda: fn(*inputs))
            warm = []
            for _ in range(3):
                t = time.perf_counter()
                call()
                warm.append(time.perf_counter() - t)
            out["warm_s"] = min(warm)
        y = y.last_hidden_state if hasattr(y, "last_hidden_state") else y
        ref = ref.last_hidden_state if hasattr(ref, "last_hidden_state") else ref
        out["eager_diff"] = (y - ref).abs().max().item()
        out["identical"] = bool(torch.equal(y, torch.load(os.path.join(d, "out.pt"))))
        parts = updraft.last_report().partitions
        out["plan_ms"] = sum(p.plan_ms for p in parts)
        out["plan_cpu_ms"] = sum(p.plan_cpu_ms for p in parts)
        out["bind_ms"] = sum(p.cache_ms for p in parts)  # precompile: entry load + fold replay
    print(json.dumps(out))


def _spawn(mode: str, name: str, d: str) -> dict:
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", mode, name, d],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"worker {mode} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "MODEL", "DIR"))
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker)
        return
    with tempfile.TemporaryDirectory() as d:
        saved = _spawn("save", a.model, d)
        print(f"{a.model}: aot_compile {saved['aot_compile_s']:.2f} s, save {saved['save_s']:.2f} s, "
              f"artifact {saved['bytes'] / 1e6:.2f} MB (updraft's part {saved['updraft_bytes'] / 1e6:.2f} MB)")
        rows = {m: [_spawn(m, a.model, d) for _ in range(a.runs)] for m in ("load", "compile")}
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    print("| path | import torch+updraft s | import torch._dynamo s | load / torch.compile s (CPU) | first call s "
          "(CPU; plan wall / CPU ms, bind ms) | load + first call s | later call s (best of 3) | max diff vs eager | "
          "identical to saver |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, label in (("load", "precompile"), ("compile", "torch.compile")):
        rs = rows[m]
        print(f"| {label} | {med(rs, 'import_s'):.2f} | {med(rs, 'dynamo_import_s'):.2f} | "
              f"{med(rs, 'load_s'):.3f} ({med(rs, 'load_cpu_s'):.3f}) | "
              f"{med(rs, 'first_s'):.3f} ({med(rs, 'first_cpu_s'):.3f}; "
              f"{med(rs, 'plan_ms'):.0f} / {med(rs, 'plan_cpu_ms'):.0f}, {med(rs, 'bind_ms'):.0f}) | "
              f"{statistics.median(r['load_s'] + r['first_s'] for r in rs):.3f} | "
              f"{med(rs, 'warm_s'):.3f} | "
              f"{max(r['eager_diff'] for r in rs):.2g} | {all(r['identical'] for r in rs)} |")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
