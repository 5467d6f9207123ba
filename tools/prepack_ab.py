"""Prepacked vs in-place linear weights at the 156M Llama's projection shapes (8 layers of q, k, v, o,
gate, up, down; 90M weights), one compiled module each, interleaved rounds, median ms per call.

    python tools/prepack_ab.py 1,32        # M values (tokens per call)
"""
import sys, time, statistics, torch, updraft
from updraft import CompilerConfig, get_backend
torch.set_num_threads(2)
torch.manual_seed(0)
from decode_linears import Stack  # the 8 layers' projections (tools/decode_linears.py)
m = Stack().eval()
H = 1024
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
