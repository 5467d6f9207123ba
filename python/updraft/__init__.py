"""updraft: a torch.compile backend whose core is a standalone C++ graph engine.

    import torch
    compiled = torch.compile(model, backend="updraft")      # registered by entry point
    print(updraft.explain(model, example_input))            # what ran in the engine, and why not

The compiled extension is `updraft._C`; it is imported lazily, when a graph is compiled.
"""
from __future__ import annotations

import os


# The setting for a machine whose load already fills its cores at import; None: libgomp's own
# default (a long spin, 300000 iterations), as eager PyTorch gets. Measured in
# docs/BENCHMARKS.md, "Issue 20: OpenMP wait policy".
_WAIT_LOADED = ("OMP_WAIT_POLICY", "passive")


def _wait_setting(load_1min: float, cores: int) -> tuple[str, str] | None:
    """The OpenMP wait setting for a machine with this 1-minute load average and core count,
    or None to leave libgomp's default.

    How long a thread that waits for work should spin before it sleeps depends on whether
    another process wants its core. With the cores to itself, spinning long is fastest: on a
    calm 2-core Xeon (session 20) libgomp's default spin gave 156M Llama decode 24.4 ms/token,
    the zoo MLP 0.41 / 1.89 ms (batch 1 / 64), where GOMP_SPINCOUNT=1000 gave 43.2, 1.62 and
    2.68 and passive 26.7, 1.01 and 3.73; ResNet-50 46-47 ms against 100-108 with 1000. A
    short wait pays a futex wake per parallel region, and on that host a wake cost far more
    than on the earlier ones. With a busy neighbour a long spin collapses (2-20x slower) and
    sleeping at once is best. So a machine already busy at import (load average at least the
    core count) gets passive waiting, and any other keeps the default, which is what eager
    PyTorch, Inductor and llama.cpp run with: load that arrives after the import hurts
    updraft as much as them, no more (the doc says what a user expecting it should set).
    libgomp reads the setting once, when it loads, so this is one decision per process.
    Figures: docs/BENCHMARKS.md, "Issue 20: OpenMP wait policy".
    """
    return _WAIT_LOADED if load_1min >= cores else None


def _default_openmp_wait_policy() -> None:
    """Sets the process's OpenMP wait policy (_wait_setting) unless the user chose one.

    The engine, oneDNN and PyTorch share one libgomp per process (whichever copy loads first),
    and libgomp reads the setting once, when it loads; so this only acts when `updraft` is
    imported before torch or the engine, and never when the user set OMP_WAIT_POLICY or
    GOMP_SPINCOUNT. It does not restore the variable: the runtime loads later, and child
    processes inherit it. When the load average cannot be read, the calm setting applies
    (libgomp's default: nothing is set).
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
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    setting = _wait_setting(load, os.cpu_count() or 1)
    if setting is not None:
        env[setting[0]] = setting[1]


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
           "profile", "quantize_weights"]


def get_backend(config: CompilerConfig | None = None):
    """A torch.compile backend using `config`: torch.compile(m, backend=get_backend(cfg))."""
    from .backend import get_backend as _get_backend

    return _get_backend(config)


def profile(fn, *args, runs: int = 20, warmup: int = 2, train: bool = False, **kwargs):
    """Calls a compiled model `runs` times and returns where the engine spent its time, per op
    and kernel (see updraft.profiler). train=True: with autograd on (a training step)."""
    from .profiler import profile as _profile

    return _profile(fn, *args, runs=runs, warmup=warmup, train=train, **kwargs)


def explain(model, *inputs, config: CompilerConfig | None = None, train: bool = False, **kwargs) -> Report:
    """Compiles `model` with updraft, runs it once on `inputs` under torch.no_grad(), and
    returns the Report: ops in the engine vs in PyTorch, reasons, partitions, compile time.
    train=True: runs with autograd on, so the training forward and backward graphs are
    compiled and reported (backward from the output's sum when the call did not run one)."""
    from .explainer import explain as _explain

    return _explain(model, *inputs, config=config, train=train, **kwargs)


def quantize_weights(model, dtype: str = "int8", **kwargs):
    """Replaces the model's large linear layers (in place) by layers that store their weights as
    int8 (per output channel) or bf16 and release the f32 ones; the engine reads them as they are.
    Returns a summary. See updraft.quantize and docs/quantization.md."""
    from .quantize import quantize_weights as _quantize_weights

    return _quantize_weights(model, dtype, **kwargs)


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
