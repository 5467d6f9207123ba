"""Whether fusing the projections that share an input pays: the 156M Llama's 8 layers of
projections (tools/decode_linears.py's shapes) with q, k, v as three linears and gate, up as
two, against the same layers with one [q; k; v] weight and one [gate; up] weight whose outputs
are split (what a horizontal-fusion pass would make of them, split copies included), through
updraft at one weight_dtype. Prints the first quartile and median ms per pass of each form, the
forms alternated in fresh processes so that both see the same machine:

    PYTHONPATH=python python tools/fused_projections_ab.py int4 --activations int8 --rows 1 --threads 2
    PYTHONPATH=python python tools/fused_projections_ab.py f32 --rows 32 --rounds 3

The fused form is built from the separate form's weights (concatenated), and the parent checks
that both compute the same outputs before it prints a timing. docs/BENCHMARKS.md, "Issue 20:
projections that share an input, fused or not (session 52)", has the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from updraft.config import ACTIVATION_DTYPES, WEIGHT_DTYPES

KV = 256  # k and v's rows (4 key-value heads of 64); H, I and the layer count: decode_linears.py


def child(a: argparse.Namespace) -> None:
    import torch

    from decode_linears import H, I, Stack  # the same shapes and stack (this script's folder)
    from updraft import CompilerConfig, get_backend

    torch.set_num_threads(a.threads)
    fused = a.form == "fused"

    def lin(o, i):
        return torch.nn.Linear(i, o, bias=False)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.g, self.u = lin(H, H), lin(KV, H), lin(KV, H), lin(I, H), lin(I, H)
            self.o, self.d = lin(H, H), lin(H, I)
            if fused:  # the same weights, concatenated: both forms compute the same function
                rng = torch.get_rng_state()  # the next layers' weights as the separate form draws them
                self.qkv, self.gu = lin(H + 2 * KV, H), lin(2 * I, H)
                torch.set_rng_state(rng)
                with torch.no_grad():
                    self.qkv.weight.copy_(torch.cat([self.q.weight, self.k.weight, self.v.weight]))
                    self.gu.weight.copy_(torch.cat([self.g.weight, self.u.weight]))
                del self.q, self.k, self.v, self.g, self.u

        def forward(self, x):
            x = x * 1.0001
            if fused:
                q, k, v = self.qkv(x).split([H, KV, KV], -1)
            else:
                q, k, v = self.q(x), self.k(x), self.v(x)
            a = q + self.o(x)
            b = (k.sum() + v.sum()) * 1e-3  # k and v read, without drowning the rest of the output
            g, u = self.gu(a).split([I, I], -1) if fused else (self.g(a), self.u(a))
            return self.d(torch.nn.functional.silu(g) * u) + b

    torch.manual_seed(0)
    opts = {"inference": "engine", "weight_dtype": a.weight_dtype}
    if a.activations != "f32":
        opts["activation_dtype"] = a.activations
    c = torch.compile(Stack(Layer).eval(), backend=get_backend(CompilerConfig(**opts)))
    x = torch.randn(1, a.rows, H, generator=torch.Generator().manual_seed(1))
    ts = []
    with torch.no_grad():
        y = c(x)
        for _ in range(4):
            c(x)
        for _ in range(a.calls):
            t = time.perf_counter()
            c(x)
            ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    print(json.dumps({"q1": ts[len(ts) // 4], "median": statistics.median(ts), "y": y.flatten()[:64].tolist()}))


def max_rel_diff(a: list[float], b: list[float]) -> float:
    """max |a - b| / max |b| over two lists of the children's outputs."""
    return max(abs(p - q) for p, q in zip(a, b)) / max(max(abs(q) for q in b), 1e-30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("weight_dtype", choices=WEIGHT_DTYPES)
    p.add_argument("--activations", choices=ACTIVATION_DTYPES, default="f32")
    p.add_argument("--rows", type=int, default=1, help="rows of x (1: a decode step; 32: a prompt)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per form, alternated")
    p.add_argument("--calls", type=int, default=60, help="timed passes per process")
    p.add_argument("--form", choices=["separate", "fused"], help=argparse.SUPPRESS)  # a child's
    a = p.parse_args()
    if a.form:
        child(a)
        return
    got: dict[str, list[dict]] = {"separate": [], "fused": []}
    for _ in range(a.rounds):
        for form in got:
            argv = [sys.executable, __file__, *sys.argv[1:], "--form", form]
            out = subprocess.run(argv, capture_output=True, text=True, env=os.environ, check=True).stdout
            got[form].append(json.loads(out.strip().splitlines()[-1]))
    # Both forms must compute the same outputs (the same weights; a quantised row's scales are
    # its own, so concatenating rows changes no value): a timing of a wrong form is no result.
    diff = max_rel_diff(got["fused"][0]["y"], got["separate"][0]["y"])
    if diff > 1e-4:
        sys.exit(f"fused_projections_ab: the fused form's outputs differ from the separate form's "
                 f"(max relative difference {diff:.2e}); the timings would compare different work")
    print(f"{a.weight_dtype} weights, {a.activations} activations, {a.rows} row(s), {a.threads} thread(s), "
          f"{a.rounds} processes per form (ms per pass of the 56 projections: q1 / median per process)")
    for form, rows in got.items():
        cells = ", ".join(f"{r['q1']:.2f} / {r['median']:.2f}" for r in rows)
        print(f"  {form:9} {cells}   median of q1s {statistics.median(r['q1'] for r in rows):.2f}")


if __name__ == "__main__":
    main()
