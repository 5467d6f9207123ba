"""What the debug tools share: the tensors of a model's output, and where an FX node came from."""
from __future__ import annotations

from typing import Any

import torch


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """The tensors of a model output, in a fixed order (tensors, tuples, lists, dicts, HF outputs)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        out = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    return []


def source_line(node: Any) -> str:
    """Where an FX node came from: the last frame of its stack trace ('file:line in fn: code'),
    else the module that made it (nn.Sequential layers have no frame of user code), else ""."""
    if node is None:
        return ""
    trace = node.meta.get("stack_trace") or ""
    at = trace.rfind('File "')
    if at >= 0:
        lines = [ln.strip() for ln in trace[at:].strip().splitlines()
                 if ln.strip() and not ln.strip().startswith("^")]
        head = lines[0]  # File "x.py", line 9, in forward
        try:
            path = head.split('"')[1]
            rest = head.split('"', 2)[2]  # , line 9, in forward
            line = rest.split("line", 1)[1].split(",")[0].strip()
            fn = rest.rsplit("in ", 1)[1].strip()
            where = f"{path}:{line} in {fn}"
        except IndexError:
            where = head
        code = lines[1] if len(lines) > 1 else ""
        return f"{where}: {code}" if code else where
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, cls = list(stack.values())[-1]
        return f"module {path} ({getattr(cls, '__name__', cls)})"
    return ""
