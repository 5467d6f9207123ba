"""updraft.explain: compile a model once in a fresh Dynamo cache slot and report decisions."""
from __future__ import annotations

from typing import Any, Optional

import torch

from .backend import get_backend
from .config import CompilerConfig
from .report import Report, set_collector


def explain(model: Any, *inputs: Any, config: Optional[CompilerConfig] = None,
            **kwargs: Any) -> Report:
    report = Report()
    backend = get_backend(config)
    set_collector(report)
    try:
        # A fresh backend object fails Dynamo's backend-identity guard on cached code, so this
        # recompiles even if `model` was compiled before; other compiled code is untouched.
        compiled = torch.compile(model, backend=backend, dynamic=False)
        with torch.no_grad():
            compiled(*inputs, **kwargs)
    finally:
        set_collector(None)
    return report
