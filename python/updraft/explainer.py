"""updraft.explain: compile a model once in a fresh Dynamo cache slot and report decisions."""
from __future__ import annotations

from typing import Any, Optional

import torch

from .backend import get_backend
from .config import CompilerConfig
from .report import Report, set_collector


def explain(model: Any, *inputs: Any, config: Optional[CompilerConfig] = None, train: bool = False,
            **kwargs: Any) -> Report:
    report = Report()
    backend = get_backend(config)
    set_collector(report)
    try:
        # A fresh backend object fails Dynamo's backend-identity guard on cached code, so this
        # recompiles even if `model` was compiled before; other compiled code is untouched.
        compiled = torch.compile(model, backend=backend, dynamic=False)
        if not train:
            with torch.no_grad():
                compiled(*inputs, **kwargs)
        else:
            with torch.enable_grad():
                out = compiled(*inputs, **kwargs)
                if not any(g.kind == "training backward" for g in report.graphs):
                    _backward_from(out)
    finally:
        set_collector(None)
    return report


def _backward_from(out: Any) -> None:
    """Runs backward from the sum of the floating outputs that need grad (a model's forward
    under explain(train=True)); a call that returns none, such as a training step that ran its
    own backward, has nothing to run."""
    leaves = [t for t in torch.utils._pytree.tree_leaves(out)
              if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None]
    if leaves:
        torch.autograd.backward([t.sum() for t in leaves])
