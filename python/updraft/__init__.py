"""updraft: a torch.compile backend whose core is a standalone C++ graph engine.

    import torch
    compiled = torch.compile(model, backend="updraft")      # registered by entry point
    print(updraft.explain(model, example_input))            # what ran in the engine, and why not

The compiled extension is `updraft._C`; it is imported lazily, when a graph is compiled.
"""
from __future__ import annotations

import os


_SPIN_COUNT = "1000"


def _default_openmp_wait_policy() -> None:
    """Makes idle OpenMP threads spin only briefly before they sleep (GOMP_SPINCOUNT=1000).

    libgomp's default spins for a long time (about 300,000 iterations) before a waiting thread
    sleeps. On a machine whose cores are busy with other processes that turns every 2-thread
    parallel region into a wait for a time slice (measured: MLP batch 64 with one busy
    neighbour, 216 ms per call with the default spin vs 2.0 ms with threads that sleep at once,
    OMP_WAIT_POLICY=passive). But sleeping at once costs a futex wake-up per region on an idle
    machine (this VM: ~50 us; MLP batch 64 idle 1.72 ms passive vs 1.25 ms spinning). A short
    spin keeps most of both: idle 1.33 ms, busy neighbour 2.31 ms (docs/BENCHMARKS.md, "OpenMP
    under load"). The engine, oneDNN and PyTorch share one libgomp per process (whichever copy
    loads first), and libgomp reads the setting once, when it loads; so this only acts when
    `updraft` is imported before torch or the engine, and never when the user set
    OMP_WAIT_POLICY or GOMP_SPINCOUNT. It does not restore the variable: the runtime loads
    later, and child processes inherit it.
    """
    env = os.environ
    if "OMP_WAIT_POLICY" in env or "GOMP_SPINCOUNT" in env:
        return  # the user's choice
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return  # not Linux (or no procfs): leave the runtime's default
    if "libgomp" in maps or "libiomp" in maps or "libomp" in maps:
        return  # an OpenMP runtime is already loaded and has read its settings
    env["GOMP_SPINCOUNT"] = _SPIN_COUNT


_default_openmp_wait_policy()

from .config import CompilerConfig  # noqa: E402
from .gears import Gear  # noqa: E402
from .report import Report, last_report  # noqa: E402

try:
    from importlib.metadata import version as _dist_version

    __version__ = _dist_version("updraft")
except Exception:  # running from a source tree without an installed distribution
    __version__ = "0.2.0"

__all__ = ["CompilerConfig", "Gear", "Report", "__version__", "explain", "export", "get_backend", "last_report", "load",
           "profile"]


def get_backend(config: CompilerConfig | None = None):
    """A torch.compile backend using `config`: torch.compile(m, backend=get_backend(cfg))."""
    from .backend import get_backend as _get_backend

    return _get_backend(config)


def profile(fn, *args, runs: int = 20, warmup: int = 2, **kwargs):
    """Calls a compiled model `runs` times and returns where the engine spent its time, per op
    and kernel (see updraft.profiler)."""
    from .profiler import profile as _profile

    return _profile(fn, *args, runs=runs, warmup=warmup, **kwargs)


def explain(model, *inputs, config: CompilerConfig | None = None, **kwargs) -> Report:
    """Compiles `model` with updraft, runs it once on `inputs` under torch.no_grad(), and
    returns the Report: ops in the engine vs in PyTorch, reasons, partitions, compile time."""
    from .explainer import explain as _explain

    return _explain(model, *inputs, config=config, **kwargs)



def __getattr__(name: str):
    # updraft.export and updraft.load are modules that can be called as their function
    # (updraft.export(model, inputs, path), updraft.load(path)): Python sets the package
    # attribute to the submodule whenever it is imported, so a function of the same name here
    # would be replaced by the module at the first `import updraft.export`. Imported on first
    # use: `import updraft` stays free of torch.
    if name in ("export", "load"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'updraft' has no attribute {name!r}")
