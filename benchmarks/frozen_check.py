"""The per-call check of a compiled inference graph's frozen tensors (`_C.frozen_unchanged`,
backend.PartitionedGraph): microseconds per call with version checks only, and with batch norm's
running statistics also compared by their bytes against a snapshot (docs/decisions.md,
"Freezing, and what invalidates it"). torchvision's classifiers with random weights (from
build/torchvision, as the tests take it: tools/torchvision_cpu.py):

    python benchmarks/frozen_check.py [--models resnet50 mobilenet_v2] [--calls 2000]
"""
import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2"])
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    import torchvision_cpu
    torchvision_cpu.activate()
    import torchvision

    from updraft import _C

    for name in a.models:
        m = getattr(torchvision.models, name)(weights=None)
        ts = list(m.parameters()) + [b for b in m.buffers() if b.is_floating_point()]
        stats = {id(b) for mod in m.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)
                 for b in (mod.running_mean, mod.running_var)}
        snaps = {i: t.clone() for i, t in enumerate(ts) if id(t) in stats}
        plain = [(i, t, t._version) for i, t in enumerate(ts)]
        checked = [(i, t, t._version, snaps[i], snaps[i].data_ptr(), snaps[i].nbytes) if i in snaps
                   else (i, t, t._version) for i, t in enumerate(ts)]
        kb = sum(s.nbytes for s in snaps.values()) / 1024
        cells = []
        for bound in (plain, checked):
            for _ in range(100):
                _C.frozen_unchanged(ts, bound)
            t0 = time.perf_counter()
            for _ in range(a.calls):
                _C.frozen_unchanged(ts, bound)
            cells.append((time.perf_counter() - t0) / a.calls * 1e6)
        print(f"{name}: {len(ts)} frozen tensors, {len(snaps)} running statistics ({kb:.0f} KB): "
              f"versions only {cells[0]:.1f} us a call, with the statistics' bytes {cells[1]:.1f} us")


if __name__ == "__main__":
    main()
