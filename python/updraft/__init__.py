"""updraft: a torch.compile backend whose core is a standalone C++ graph engine.

    import torch
    compiled = torch.compile(model, backend="updraft")      # registered by entry point
    print(updraft.explain(model, example_input))            # what ran in the engine, and why not

The compiled extension is `updraft._C`; it is imported lazily, when a graph is compiled.
"""
from __future__ import annotations

from .config import CompilerConfig
from .gears import Gear
from .report import Report, last_report

try:
    from importlib.metadata import version as _dist_version

    __version__ = _dist_version("updraft")
except Exception:  # running from a source tree without an installed distribution
    __version__ = "0.2.0"

__all__ = ["CompilerConfig", "Gear", "Report", "__version__", "explain", "get_backend", "last_report"]


def get_backend(config: CompilerConfig | None = None):
    """A torch.compile backend using `config`: torch.compile(m, backend=get_backend(cfg))."""
    from .backend import get_backend as _get_backend

    return _get_backend(config)


def explain(model, *inputs, config: CompilerConfig | None = None, **kwargs) -> Report:
    """Compiles `model` with updraft, runs it once on `inputs` under torch.no_grad(), and
    returns the Report: ops in the engine vs in PyTorch, reasons, partitions, compile time."""
    from .explainer import explain as _explain

    return _explain(model, *inputs, config=config, **kwargs)
