"""Model files (issue 16): updraft.load's call path, latency vs eager, export and load times.

    python benchmarks/model_file.py overhead                 # per-call cost of updraft.load over the bare plan
    python benchmarks/model_file.py latency --models mlp resnet50 [--threads N]
    python benchmarks/model_file.py files --models bert resnet50   # export time, size, load cold / page-cached

overhead: a one-op model ([1, 8] f32 + 1) exported and loaded; blocks of calls, interleaved,
of (a) the bare plan: the loaded model's own PlannedCall run on preallocated buffers by
pointers, (b) the same plus allocating the output with torch.empty (what any caller of a plan
does), (c) `loaded(x)`, (d) torch.compile(backend="updraft") for scale. Medians of block medians.

latency: eager, updraft.load, torch.compile(backend="updraft") and the loaded model's bare plan
(preallocated outputs, by pointers) on a zoo model at batch 1, interleaved blocks of calls,
medians of block medians; outputs of load and compile are compared bit for bit.

files: per model, one export (time, file size vs the parameters' bytes), then `--loads` fresh
processes each loading the file and running it once, first with the file's pages evicted from
the page cache (posix_fadvise DONTNEED: cold) and then after reading it (page-cached); prints
the medians of load time (updraft.load, of which the engine's read/map + checksum + parse) and
of the first call (its plan build).
Nothing here asserts on timings; run it under `nice -n 19` on a shared machine.
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

import updraft  # noqa: F401  (first: its default OpenMP wait policy must precede torch's libgomp)
import torch
from updraft import zoo


def _blocks(fns: dict, blocks: int, iters: int) -> dict:
    """Median over blocks of each block's median per-call time (us), the arms interleaved."""
    per = {k: [] for k in fns}
    for _ in range(blocks):
        for name, fn in fns.items():
            ts = []
            for _ in range(iters):
                t = time.perf_counter_ns()
                fn()
                ts.append(time.perf_counter_ns() - t)
            per[name].append(statistics.median(ts) / 1e3)
    return {k: (statistics.median(v), _iqr(v)) for k, v in per.items()}


def _iqr(v: list) -> float:
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else [0, 0, 0]
    return q[2] - q[0]


def overhead(args: argparse.Namespace) -> None:
    class AddOne(torch.nn.Module):
        def forward(self, x):
            return x + 1

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "add.updraft")
        x = torch.randn(1, 8)
        updraft.export(AddOne(), (x,), path)
        loaded = updraft.load(path)
        loaded(x)
        plan = loaded._calls[(tuple(x.shape),)][0]
        out = torch.empty(1, 8)
        ptrs, optrs = [x.data_ptr()], [out.data_ptr()]
        compiled = torch.compile(AddOne(), backend="updraft")
        with torch.no_grad():
            compiled(x)
            compiled(x)
        torch.testing.assert_close(loaded(x), x + 1)

        def bare():
            plan.run(ptrs, optrs)

        def bare_alloc():
            o = torch.empty(1, 8)
            plan.run([x.data_ptr()], [o.data_ptr()])

        def via_load():
            loaded(x)

        def via_compile():
            with torch.no_grad():
                compiled(x)

        r = _blocks({"bare plan": bare, "bare plan + torch.empty": bare_alloc, "updraft.load": via_load,
                     "torch.compile": via_compile}, args.blocks, args.iters)
    for k, (m, q) in r.items():
        print(f"{k:28s} {m:8.2f} us (IQR {q:.2f})")
    print(f"updraft.load over the bare plan: {r['updraft.load'][0] - r['bare plan'][0]:.2f} us; "
          f"over plan + output allocation: {r['updraft.load'][0] - r['bare plan + torch.empty'][0]:.2f} us")


def latency(args: argparse.Namespace) -> None:
    config = updraft.CompilerConfig(num_threads=args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in args.models:
        model, inputs = zoo.build(name, batch=1)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.updraft")
            updraft.export(model, inputs, path)
            loaded = updraft.load(path, config=config)
            compiled = torch.compile(model, backend=updraft.get_backend(config))
            with torch.no_grad():
                got = loaded(*inputs)
                got = got[0] if isinstance(got, tuple) else got
                want = zoo.first_tensor(compiled(*inputs))
                err = (got - zoo.first_tensor(model(*inputs))).abs().max().item()

            def eager():
                with torch.no_grad():
                    model(*inputs)

            def via_compile():
                with torch.no_grad():
                    compiled(*inputs)

            plan, templates = loaded._calls[tuple(tuple(t.shape) for t in inputs)]
            outs = [torch.empty_like(t) for t in templates]
            ptrs, optrs = [t.data_ptr() for t in inputs], [o.data_ptr() for o in outs]

            def bare():
                plan.run(ptrs, optrs)

            r = _blocks({"eager": eager, "updraft.load": lambda: loaded(*inputs), "torch.compile": via_compile,
                         "bare plan": bare},
                        args.blocks, max(3, args.iters // (1 if name == "mlp" else 50)))
        e = r["eager"][0]
        print(f"{name} batch 1, {args.threads or torch.get_num_threads()} thread(s): " + ", ".join(f"{k} {m / 1e3:.3f} ms (IQR {q / 1e3:.3f}, {e / m:.2f}x eager)"
                                               for k, (m, q) in r.items())
              + f"; load vs compile bit-identical: {torch.equal(got, want)}; max abs diff vs eager {err:.2g}")


_LOAD_WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
import updraft, torch
t1 = time.perf_counter()
m = updraft.load(sys.argv[1])
t2 = time.perf_counter()
x = torch.load(sys.argv[2])
m(*x)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_ms": (t2 - t1) * 1e3, "engine_load_ms": m.info["load_ms"],
                  "verify_ms": m.info["verify_ms"], "first_call_ms": (t3 - t2) * 1e3}))
"""


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _load_once(path: str, inputs_path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _LOAD_WORKER, path, inputs_path], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def files(args: argparse.Namespace) -> None:
    folder = args.dir or tempfile.mkdtemp()
    for name in args.models:
        model, inputs = zoo.build(name, batch=1)
        path = os.path.join(folder, f"{name}.updraft")
        inputs_path = path + ".inputs.pt"
        torch.save(inputs, inputs_path)
        if args.reuse and os.path.exists(path):
            print(f"{name}: reusing {path}")
        else:
            info = updraft.export(model, inputs, path)
            print(f"{name}: export {info.export_s:.1f} s; file {info.file_bytes / 1e6:.1f} MB, parameters "
                  f"{info.parameter_bytes / 1e6:.1f} MB ({info.file_bytes / info.parameter_bytes:.3f}x)")
        del model
        for kind in ("cold", "page-cached"):
            rows = []
            for _ in range(args.loads):
                if kind == "cold":
                    _evict(path)
                else:
                    with open(path, "rb") as f:
                        while f.read(1 << 24):
                            pass
                rows.append(_load_once(path, inputs_path))
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(f"  {kind:12s} updraft.load {med['load_ms']:.1f} ms (engine: read/map + verify + parse "
                  f"{med['engine_load_ms']:.1f} ms, of which checksum {med['verify_ms']:.1f} ms); first call "
                  f"{med['first_call_ms']:.1f} ms; import updraft+torch {med['import_s']:.2f} s  "
                  f"[median of {args.loads}]")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--blocks", type=int, default=15)
    o.add_argument("--iters", type=int, default=2000)
    o.set_defaults(func=overhead)
    lat = sub.add_parser("latency")
    lat.add_argument("--models", nargs="+", default=["mlp", "resnet50"])
    lat.add_argument("--blocks", type=int, default=9)
    lat.add_argument("--iters", type=int, default=300)
    lat.add_argument("--threads", type=int, default=0, help="eager's and the engine's threads (0: defaults)")
    lat.set_defaults(func=latency)
    f = sub.add_parser("files")
    f.add_argument("--models", nargs="+", default=["bert", "resnet50"])
    f.add_argument("--loads", type=int, default=5)
    f.add_argument("--dir", default=None, help="where to write the files (default: a new temporary folder)")
    f.add_argument("--reuse", action="store_true", help="with --dir: load the files exported there before")
    f.set_defaults(func=files)
    args = p.parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
