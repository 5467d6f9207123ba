"""Times a convolution with each fused activation, per engine step, in the layouts the engine
keeps (docs/BENCHMARKS.md, "Issue 19: activations after gemm-based convolutions").

    PYTHONPATH=python python benchmarks/conv_activation.py [--threads 1] [--layouts nchw auto]
        [--shapes 24x144x56 320x1280x7] [--kernel 1] [--runs 100]

Each row is one `Conv2d(C, O, k) + activation` model (batch 1, H = W as given) compiled with
`CompilerConfig(conv_layout=...)`, and the median time of its conv2d step over --runs calls
(`updraft.profile`'s trace), beside the kernel that ran. A lone conv in the default layout reads
and writes plain NCHW when it is 1x1 (its edges would cost copies), channels-last or blocked
when larger (`--layouts auto --kernel 3`); "nchw" (the default) is the layout a 1x1 conv keeps
in training graphs or at a graph output, and any conv whose channels cannot be blocked. "none" is the
conv alone: each activation's row minus it is what the activation costs.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile

import torch

import updraft

ACTIVATIONS = {
    "none": torch.nn.Identity,
    "relu": torch.nn.ReLU,
    "relu6": torch.nn.ReLU6,
    "hardswish": torch.nn.Hardswish,
    "silu": torch.nn.SiLU,
    "gelu": torch.nn.GELU,
}


def conv_step_us(model: torch.nn.Module, x: torch.Tensor, layout: str, runs: int) -> tuple[float, str]:
    """The median conv2d step time (us) of `model` compiled with `layout`, and its kernel."""
    compiled = torch.compile(model, backend="updraft", options={"conv_layout": layout, "cache_dir": ""})
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        updraft.profile(compiled, x, runs=runs, trace=trace)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    steps = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "updraft.step" and e["args"]["op"] == "conv2d":
            steps[e["args"]["kernel"]].append(e["dur"])
    if len(steps) != 1:
        raise RuntimeError(f"expected one conv2d kernel, got {sorted(steps)}")
    (kernel, durs), = steps.items()
    torch._dynamo.reset()
    return statistics.median(durs), kernel.removeprefix("onednn_f32_conv2d:")


def shape(text: str) -> tuple[int, int, int]:
    """--shapes' CxOxH, three positive integers."""
    try:
        dims = tuple(int(v) for v in text.split("x"))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not CxOxH (e.g. 24x144x56)")
    return dims


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layouts", nargs="+", default=["nchw"])
    p.add_argument("--shapes", nargs="+", type=shape, default=["24x144x56", "64x256x56", "160x960x7", "320x1280x7"],
                   help="CxOxH: input channels, output channels, image side")
    p.add_argument("--kernel", type=int, default=1, help="kernel size (padding keeps the image size)")
    p.add_argument("--activations", nargs="+", default=list(ACTIVATIONS), choices=list(ACTIVATIONS))
    p.add_argument("--runs", type=int, default=100)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"conv {args.kernel}x{args.kernel}, batch 1, {args.threads} thread(s); median us of the conv2d step "
          f"over {args.runs} calls\n")
    print("| C x O x H | layout | " + " | ".join(args.activations) + " | kernel |")
    print("|---" * (len(args.activations) + 3) + "|")
    for c, o, h in args.shapes:
        x = torch.randn(1, c, h, h)
        for layout in args.layouts:
            cells, kernels = [], set()
            for act in args.activations:
                torch.manual_seed(0)
                conv = torch.nn.Conv2d(c, o, args.kernel, padding=args.kernel // 2)
                us, kernel = conv_step_us(torch.nn.Sequential(conv, ACTIVATIONS[act]()).eval(), x, layout, args.runs)
                cells.append(f"{us:.1f}")
                kernels.add(kernel)
            print(f"| {c}x{o}x{h} | {layout} | " + " | ".join(cells) + " | " + ", ".join(sorted(kernels)) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
