"""Time the 156M Llama's decode linears alone: the 8 layers' 56 projections (q, k, v, o, gate,
up, down; `Stack`, which `tools/prepack_ab.py` uses too) in one compiled module, x [1, M,
1024], one weight_dtype per process; prints the first quartile and median ms per pass over the
rounds and GB/s of weight bytes. `--rows` above 11 times the prefill path (panels). For A/B runs, alternate two builds in fresh processes (PYTHONPATH selects the package):

    PYTHONPATH=python python tools/decode_linears.py int8 --rows 1 --threads 2 --rounds 30
    PYTHONPATH=python python tools/decode_linears.py int8 --activations int8 --rows 32   # int8 x int8
"""
import argparse
import statistics
import time

import torch

import updraft
from updraft import CompilerConfig, get_backend
from updraft.config import ACTIVATION_DTYPES, WEIGHT_DTYPES

H, I, LAYERS = 1024, 2816, 8


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        lin = lambda o, i: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.q, self.k, self.v, self.o = lin(H, H), lin(256, H), lin(256, H), lin(H, H)
        self.g, self.u, self.d = lin(I, H), lin(I, H), lin(H, I)

    def forward(self, x):
        x = x * 1.0001
        a = self.q(x) + self.o(x)
        b = self.k(x).sum() + self.v(x).sum()
        return self.d(self.g(a) * self.u(a)) + b


class Stack(torch.nn.Module):
    """LAYERS layers (`layer()` each: Layer by default), each output scaled down for the next."""

    def __init__(self, layer=Layer):
        super().__init__()
        self.layers = torch.nn.ModuleList([layer() for _ in range(LAYERS)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) * 0.01
        return x


def weight_bytes(m: torch.nn.Module) -> int:
    """The bytes the engine reads per pass: what the last compile stored low-precision (with
    its scales, from the report), the other parameters as f32."""
    stored = low_f32 = 0
    for part in updraft.last_report().partitions:
        for _count, b, f in part.low_precision_weights.values():
            stored, low_f32 = stored + b, low_f32 + f
    return stored + sum(q.numel() * q.element_size() for q in m.parameters()) - low_f32


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("weight_dtype", choices=WEIGHT_DTYPES)
    p.add_argument("--activations", choices=ACTIVATION_DTYPES, default="f32",
                   help="CompilerConfig.activation_dtype (int8: int8 x int8 products); default f32")
    p.add_argument("--rows", type=int, default=1, help="rows of x (decode batch); default 1")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30, help="timed rounds of --calls calls")
    p.add_argument("--calls", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Stack().eval()
    cfg = CompilerConfig(weight_dtype=a.weight_dtype, activation_dtype=a.activations, num_threads=a.threads,
                         inference="engine")
    f = torch.compile(m, backend=get_backend(cfg))
    x = torch.randn(1, a.rows, H)
    with torch.no_grad():
        for _ in range(3):
            f(x)
    wbytes = weight_bytes(m)
    with torch.no_grad():
        ts = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            for _ in range(a.calls):
                f(x)
            ts.append((time.perf_counter() - t0) / a.calls)
    ts.sort()
    q1, med = ts[len(ts) // 4], statistics.median(ts)
    print(f"{a.weight_dtype} activations={a.activations} rows={a.rows} threads={a.threads}: q1 {q1 * 1e3:.2f} ms, median {med * 1e3:.2f} ms "
          f"(min {ts[0] * 1e3:.2f}, max {ts[-1] * 1e3:.2f}); {wbytes / q1 / 1e9:.1f} GB/s of weights at q1")


if __name__ == "__main__":
    main()
