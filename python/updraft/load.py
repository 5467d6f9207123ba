"""`updraft.load`: a model file (updraft.export) as a Python callable, without torch.compile.

    model = updraft.load("bert.updraft", num_threads=4)
    out = model(input_ids)                 # torch tensors in, torch tensors out
    out = model(ids.numpy())               # NumPy in, NumPy out
    model.signature, model.info            # inputs/outputs/ranges; file size, load time...

The call path is this module and the engine: no Dynamo, guards or AOTAutograd. Per input-shape
signature it checks the shapes once against the file's signature (ModelSignature.check_shapes:
ranks, static sizes, symbol ranges), binds the engine's plan (a PlannedCall) and remembers the
output shapes; later calls with those shapes look the pair up by the shapes, check each input's
dtype and layout, allocate the outputs (torch.empty_like of a one-element template per output)
and pass data pointers (the fast path of engine_partition.py, with the same bound on bound
plans).

What it does not do: convert dtypes or move devices for the caller (a wrong dtype is an error
that says which; a strided input is made contiguous), or read the format (src/model/).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import types
from typing import Any, Optional

import torch

from .config import CompilerConfig
from .lowerer import TORCH_DTYPES  # not .lowering: importing every lowering rule costs ~0.1 s

# Bound plans kept per loaded model (a PlannedCall pins its plan and arena), oldest bound first
# out; as engine_partition._MAX_BOUND_PLANS.
_MAX_BOUND_PLANS = 16


def _c():
    from . import _C
    return _C


class LoadedModel:
    """A model file ready to run: call it with the inputs the signature lists, in order.

    Returns one tensor for a model with one output, else a tuple in the signature's output
    order (`output_names`). NumPy arrays in give NumPy arrays out. Safe to call from several
    threads at once.
    """

    def __init__(self, path: str, config: CompilerConfig, map: bool = True) -> None:
        C = _c()
        self.path = path
        try:
            cg, sig, info = C.load_model(path, config.engine_options(), map)
        except C.UpdraftError as e:
            raise C.UpdraftError(f"[updraft.load] {path}: {e}") from None
        self._cg = cg
        self._sig = sig
        self.config = config
        self.signature: dict = sig.to_dict()
        self.info: dict = dict(info, path=path)
        ins = self.signature["inputs"]
        self.input_names = [i["name"] for i in ins]
        self.output_names = [o["name"] for o in self.signature["outputs"]]
        self._n = len(ins)
        self._in_dtypes = [TORCH_DTYPES[i["dtype"]] for i in ins]
        self._size_input = [bool(i["binds"]) for i in ins]
        self._out_dtypes = [TORCH_DTYPES[d] for d in cg.output_dtypes()]
        self._single = len(self._out_dtypes) == 1
        # input shapes (a size input: (value,)) -> (PlannedCall, [output template]); changed
        # under _lock, read without it (dict.get is atomic; an evicted call keeps its plan alive).
        self._calls: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"updraft.load({self.path!r})\n{self.signature['text']}"

    def __call__(self, *inputs: Any) -> Any:
        # Fast path: torch tensors of shapes seen before, contiguous, of the model's dtypes.
        try:
            call = self._calls.get(tuple([t.shape for t in inputs]))
        except AttributeError:  # an int for a size input, or not an array at all
            call = None
        if call is not None:
            ptrs = []
            for t, dt in zip(inputs, self._in_dtypes):
                # A NumPy array's dtype is never a torch dtype: it takes the general path.
                if t.dtype is not dt or not t.is_cpu or not t.is_contiguous():
                    break
                ptrs.append(t.data_ptr())
            else:
                if self._single:
                    out = torch.empty_like(call[1][0])
                    call[0].run(ptrs, [out.data_ptr()])
                    return out
                outs = [torch.empty_like(t) for t in call[1]]
                call[0].run(ptrs, [o.data_ptr() for o in outs])
                return tuple(outs)
        return self._call(inputs)

    def _call(self, inputs: tuple) -> Any:
        """Any accepted inputs: NumPy arrays, strided tensors, size inputs; a new shape is checked
        against the signature and its plan bound."""
        import numpy as np

        if len(inputs) != self._n:
            raise TypeError(f"[updraft.load] {self.path} takes {self._n} input(s) ({', '.join(self.input_names)}), "
                            f"got {len(inputs)}")
        as_numpy = False
        tensors, key, ptrs, strided = [], [], [], []
        for k, (x, dt) in enumerate(zip(inputs, self._in_dtypes)):
            where = f"input {k} '{self.input_names[k]}'"
            if self._size_input[k]:
                if isinstance(x, torch.Tensor) and x.numel() == 1:
                    x = x.item()
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                    raise TypeError(f"[updraft.load] {where} is a size: pass an int, not {type(x).__name__}")
                key.append((int(x),))
                ptrs.append(0)  # the plan holds the value (PlannedCall)
                continue
            if isinstance(x, np.ndarray):
                as_numpy = True
                try:
                    x = torch.from_numpy(np.ascontiguousarray(x))
                except TypeError as e:
                    raise TypeError(f"[updraft.load] {where}: NumPy dtype {x.dtype} has no torch equivalent ({e})") from None
            elif not isinstance(x, torch.Tensor):
                raise TypeError(f"[updraft.load] {where} is a {type(x).__name__}; pass a torch tensor or a NumPy array")
            if not x.is_cpu:
                raise ValueError(f"[updraft.load] {where} is on {x.device}; the engine runs on the CPU: pass x.cpu()")
            if x.dtype is not dt:
                raise TypeError(f"[updraft.load] {where} has dtype {x.dtype}, the model takes {dt}: convert it "
                                f"(x.to({dt}))")
            if not x.is_contiguous():  # the plan packs it (src/runtime/plan.h)
                strided.append((k, x.stride()))
            tensors.append(x)  # keeps a converted input alive through the run
            key.append(tuple(x.shape))
            ptrs.append(x.data_ptr())
        key = tuple(key)
        call = self._calls.get(key)
        if call is None:
            call = self._bind(key)
        outs = [torch.empty_like(t) for t in call[1]]
        call[0].run(ptrs, [o.data_ptr() for o in outs], strided)
        if as_numpy:
            outs = [o.numpy() for o in outs]
        return outs[0] if self._single else tuple(outs)

    def _bind(self, key: tuple) -> tuple:
        """Checks a new shape signature against the file's and binds its plan."""
        C = _c()
        shapes = [list(s) for s in key]
        try:
            self._sig.check_shapes(shapes)
        except C.UpdraftError as e:
            raise ValueError(f"[updraft.load] {self.path}: {e}") from None
        planned = self._cg.planned(shapes)  # outside the lock: building a plan releases the GIL
        call = (planned, [_template(s, d) for s, d in zip(planned.output_shapes, self._out_dtypes)])
        with self._lock:
            if key not in self._calls:
                while len(self._calls) >= _MAX_BOUND_PLANS:
                    del self._calls[next(iter(self._calls))]
                self._calls[key] = call
        return call


def _template(shape: list, dtype: torch.dtype) -> torch.Tensor:
    """A tensor that torch.empty_like turns into a new contiguous output of this shape and dtype,
    holding one element: an expanded scalar overlaps itself, so empty_like makes the result
    contiguous (its documented rule for preserve_format). empty_like of a template is about
    twice as fast as torch.empty(shape, dtype=...), whose keyword parsing dominates a small call."""
    t = torch.empty((), dtype=dtype).expand(shape)
    if not torch.empty_like(t).is_contiguous():  # never seen; kept correct if torch's rule changes
        t = torch.empty(shape, dtype=dtype)
    return t


def load(path: str | os.PathLike, config: Optional[CompilerConfig] = None, num_threads: Optional[int] = None,
         map: bool = True) -> LoadedModel:
    """Loads a model file written by updraft.export (docs/export.md).

    config: the CompilerConfig whose run-time options apply (num_threads, the kernel knobs,
    watchdog_s); the graph options (fold_constants, fuse...) were fixed at export. num_threads:
    shorthand for config.num_threads (0: the engine's default). map: use the weights in place in
    a read-only mapping of the file (pages shared with other processes mapping it), or read
    them into private memory. Raises UpdraftError('[updraft.load] ... [model] ...') for a file
    it refuses: missing, truncated, corrupted, newer format, CPU features this machine lacks.
    """
    if config is None:
        config = CompilerConfig()
    if not isinstance(config, CompilerConfig):
        raise TypeError(f"[updraft.load] config must be a CompilerConfig, got {type(config).__name__}")
    if num_threads is not None:
        config = dataclasses.replace(config, num_threads=num_threads)
    return LoadedModel(os.fspath(path), config, map=map)


class _CallableModule(types.ModuleType):
    """This module, callable as its function: updraft.load(...) (see updraft/__init__.py)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return load(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
