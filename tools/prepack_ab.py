"""Prepacked vs in-place linear weights at the 156M Llama's projection shapes (8 layers of q, k, v, o,
gate, up, down; 90M weights), one compiled module each, interleaved rounds, median ms per call.

    python tools/prepack_ab.py 1,32        # M values (tokens per call)
"""
import sys, time, statistics, torch, updraft
from updraft import CompilerConfig, get_backend
torch.set_num_threads(2)
torch.manual_seed(0)
H, I = 1024, 2816
class Layer(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.q = torch.nn.Linear(H, H, bias=False); s.k = torch.nn.Linear(H, 256, bias=False); s.v = torch.nn.Linear(H, 256, bias=False)
        s.o = torch.nn.Linear(H, H, bias=False); s.g = torch.nn.Linear(H, I, bias=False); s.u = torch.nn.Linear(H, I, bias=False); s.d = torch.nn.Linear(I, H, bias=False)
    def forward(s, x):
        x = x * 1.0001
        a = s.q(x) + s.o(x)
        b = s.k(x).sum() + s.v(x).sum()
        return s.d(s.g(a) * s.u(a)) + b
mods = [Layer().eval() for _ in range(8)]
class M(torch.nn.Module):
    def __init__(s): super().__init__(); s.l = torch.nn.ModuleList(mods)
    def forward(s, x):
        for l in s.l: x = l(x) * 0.01
        return x
m = M().eval()
Ms = [int(a) for a in sys.argv[1].split(",")]
dyn = len(sys.argv) > 2 and sys.argv[2] == "dyn"
fns = {}
for pp in (True, False):
    torch._dynamo.reset()
    fns[pp] = torch.compile(m, backend=get_backend(CompilerConfig(prepack_weights=pp)), dynamic=dyn)
with torch.no_grad():
  for Mv in Ms:
    x = torch.randn(1, Mv, H)
    res = {True: [], False: []}
    for pp in (True, False):
        for _ in range(3): fns[pp](x)
    for r in range(7):
        for pp in (True, False):
            t = time.perf_counter()
            for _ in range(10): fns[pp](x)
            res[pp].append((time.perf_counter() - t) / 10 * 1e3)
    print(f"M={Mv} dyn={dyn}: prepacked {statistics.median(res[True]):.2f} ms, in place {statistics.median(res[False]):.2f} ms (8 layers, 90M weights = 360 MB)")
