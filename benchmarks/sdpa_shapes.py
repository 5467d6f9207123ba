"""The engine's sdpa kernel alone, at the shapes models give it: microseconds per call and per
(batch, head), for A/B runs of two trees (PYTHONPATH=<tree>/python, alternating processes).

    python benchmarks/sdpa_shapes.py                         # the default shapes below
    python benchmarks/sdpa_shapes.py --shapes 64,3,49,32,49,mask 1,12,197,64 --threads 1
    python benchmarks/sdpa_shapes.py --swin                  # Swin-T's 12 calls as the model makes them

A shape is B,H,L,E[,S][,mask]: q [B, H, L, E], k and v [B, H, S, E] (S = L when left out), and
with "mask" a float mask [B, H, L, S]. --swin runs Swin-T's four window shapes (49 queries and
keys of 32 features, 3-24 heads) with q, k, v and the result stored [windows, 49, heads, 32]
(the `seq_first` layout fold_permute_sdpa gives them) and the relative position bias broadcast
over windows, and sums the per-call medians over the model's 2 + 2 + 6 + 2 blocks. Each graph is
one `sdpa` node through `_C.compile`; its result is checked against torch's sdpa first.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "python"))  # after PYTHONPATH: an A/B run can point at another tree

import torch  # noqa: E402

from updraft import _C  # noqa: E402

DEFAULT_SHAPES = ["64,3,49,32,49,mask", "64,3,48,32,48,mask", "1,12,197,64", "1,12,128,64,128,mask",
                  "1,12,64,64", "4,16,36,64"]
SWIN_SCALE = 32 ** -0.5
# (windows, heads, blocks) of Swin-T's four stages at 224 x 224: 49-token windows, E 32.
SWIN_STAGES = [(64, 3, 2), (16, 6, 2), (4, 12, 6), (1, 24, 2)]


def time_call(cg, ins: list, out, reps: int) -> float:
    for _ in range(20):
        cg.run(ins, [out])
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        cg.run(ins, [out])
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def plain(B: int, H: int, L: int, E: int, S: int, mask: bool, reps: int) -> float:
    m = f", %m: f32[{B}, {H}, {L}, {S}]" if mask else ""
    g = (f"graph(%q: f32[{B}, {H}, {L}, {E}], %k: f32[{B}, {H}, {S}, {E}], %v: f32[{B}, {H}, {S}, {E}]{m}) {{\n"
         f"  %a = sdpa(%q, %k, %v{', %m' if mask else ''}) {{has_mask={'true' if mask else 'false'}}}\n"
         "  return (%a)\n}")
    cg = _C.compile(_C.parse_graph(g), {})
    ins = [torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, E)]
    ins += [torch.randn(B, H, L, S)] if mask else []
    out = torch.empty(B, H, L, E)
    cg.run(ins, [out])
    ref = torch.nn.functional.scaled_dot_product_attention(*ins[:3], attn_mask=ins[3] if mask else None)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4), "sdpa differs from torch's"
    return time_call(cg, ins, out, reps)


def swin_window(W: int, H: int, reps: int) -> float:
    L, E = 49, 32
    g = (f"graph(%q: f32[{W}, {L}, {H}, {E}], %k: f32[{W}, {L}, {H}, {E}], %v: f32[{W}, {L}, {H}, {E}], "
         f"%m: f32[1, {H}, {L}, {L}]) {{\n"
         f"  %a = sdpa(%q, %k, %v, %m) {{has_mask=true, seq_first=[0, 1, 2, 3], scale={SWIN_SCALE!r}}}\n"
         "  return (%a)\n}")
    cg = _C.compile(_C.parse_graph(g), {})
    ins = [torch.randn(W, L, H, E) for _ in range(3)] + [torch.randn(1, H, L, L)]
    out = torch.empty(W, L, H, E)
    cg.run(ins, [out])
    heads_first = [t.transpose(1, 2) for t in ins[:3]]
    ref = torch.nn.functional.scaled_dot_product_attention(*heads_first, attn_mask=ins[3], scale=SWIN_SCALE)
    assert torch.allclose(out, ref.transpose(1, 2), rtol=1e-4, atol=1e-4), "sdpa differs from torch's"
    return time_call(cg, ins, out, reps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES, help="B,H,L,E[,S][,mask] (default: %(default)s)")
    p.add_argument("--swin", action="store_true", help="Swin-T's 12 calls instead of --shapes")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=300)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.swin:
        per_call = [swin_window(W, H, args.reps) for W, H, _ in SWIN_STAGES]
        total = sum(us * blocks for us, (_, _, blocks) in zip(per_call, SWIN_STAGES))
        print("| stage | windows x heads | us per call |\n|---|---|---|")
        for k, ((W, H, _), us) in enumerate(zip(SWIN_STAGES, per_call)):
            print(f"| {k + 1} | {W} x {H} | {us:.0f} |")
        print(f"\nSwin-T's 12 sdpa calls: {total / 1e3:.2f} ms")
        return
    print("| shape B,H,L,E,S | mask | us per call | us per (batch, head) |\n|---|---|---|---|")
    for spec in args.shapes:
        parts = spec.split(",")
        mask = parts[-1] == "mask"
        dims = [int(x) for x in (parts[:-1] if mask else parts)]
        if len(dims) not in (4, 5):
            p.error(f"--shapes: {spec!r} is not B,H,L,E[,S][,mask]")
        B, H, L, E = dims[:4]
        S = dims[4] if len(dims) == 5 else L
        us = plain(B, H, L, E, S, mask, args.reps)
        print(f"| {B},{H},{L},{E},{S} | {'yes' if mask else 'no'} | {us:.1f} | {us / (B * H):.2f} |")


if __name__ == "__main__":
    main()
