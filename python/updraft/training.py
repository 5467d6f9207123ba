"""Training graphs (docs/training.md): what changes before AOTAutograd traces a training step,
and which of the engine or PyTorch runs each of its graphs.

- `is_training`: AOTAutograd's own test for making forward and backward graphs.
- `attention_as_math_in`: scaled_dot_product_attention in its math form, so its gradient is
  ops the engine runs; `TRAINING_DECOMPOSED`: ops decomposed for training graphs only.
- `MeasuredChoice`: CompilerConfig(training="auto") times each graph in the engine and in
  PyTorch over its first calls and keeps the faster (never slower than eager by choice).

The backend (backend.py) compiles the graphs; this module decides nothing about partitioning.
"""
from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Callable, Optional

import torch
from torch import fx

aten = torch.ops.aten

# Training graphs decompose these too. Each is an op whose forward the engine runs but whose
# backward op it has none of, or a train-mode op with no engine op; decomposed, the forward and
# its gradient reach the engine as ops it runs (docs/training.md, "Ops").
TRAINING_DECOMPOSED = (
    # train-mode batch norm: batch mean/var reductions and elementwise ops; the new running
    # statistics are outputs that AOTAutograd writes back to the buffers
    aten._native_batch_norm_legit_functional.default,
)


def _attention_as_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """scaled_dot_product_attention in torch's math form (matmul, softmax, matmul; a composite
    that AOTAutograd traces through), so that its gradient is matmuls and elementwise ops the
    engine runs. Not the decomposition table's rule for the flash op: that rule returns the
    attention weights where the flash op returns the log-sum-exp that the flash backward op
    reads (wrong gradients if the two were mixed). A boolean mask becomes the additive one
    (-inf where False) first, as torch's own sdpa does before it calls the math op (which reads
    any mask as additive)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(attn_mask.logical_not(), float("-inf"))
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa)[0]


def attention_as_math_in(gm: fx.GraphModule) -> None:
    """Training graphs: Dynamo's scaled_dot_product_attention calls become `_attention_as_math`
    before AOTAutograd traces them (below autograd the flash op and its backward op would be
    fixed already)."""
    sdpa = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in sdpa:
            n.target = _attention_as_math
            changed = True
    if changed:
        gm.recompile()



def is_training(example_inputs: list) -> bool:
    """AOTAutograd's own test: autograd is on and some input needs grad, so it traces forward
    and backward graphs."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in example_inputs)


# Timed calls per side before MeasuredChoice decides, after one untimed call each (the engine's
# first call builds its plan).
TRIALS = 3


class MeasuredChoice:
    """Boxed callable for one training graph under CompilerConfig(training="auto"): its first
    calls alternate between the engine (`engine`, the partitioned graph) and PyTorch (`eager`,
    the same aten graph unpartitioned), starting with the engine; the first call of each is not
    timed, then TRIALS calls of each are. The side with the lower median runs every later
    call, and `on_choice(chosen, engine_ms, pytorch_ms)` records it (report, explain). Both
    sides compute the same values from the same inputs (the outputs a forward saves for its
    backward have one layout whichever side made them), so switching between calls is safe."""

    _boxed_call = True

    def __init__(self, engine: Callable, eager: Callable, on_choice: Callable[[str, float, float], None],
                 trials: int = TRIALS, clock: Callable[[], float] = time.perf_counter) -> None:
        self.engine, self.eager, self.on_choice = engine, eager, on_choice
        self.trials, self.clock = trials, clock
        self.times: dict = {"engine": [], "pytorch": []}
        self.calls = 0
        self.chosen: Optional[str] = None
        self._run: Optional[Callable] = None
        self._lock = threading.Lock()

    def __call__(self, args: list) -> Any:
        run = self._run
        if run is not None:
            return run(args)
        with self._lock:
            i = self.calls
            self.calls += 1
        side = "engine" if i % 2 == 0 else "pytorch"
        fn = self.engine if side == "engine" else self.eager
        t0 = self.clock()
        out = fn(list(args))
        elapsed = self.clock() - t0
        if i >= 2:
            with self._lock:
                self.times[side].append(elapsed)
                if self._run is None and all(len(t) >= self.trials for t in self.times.values()):
                    self._decide()
        return out

    def _decide(self) -> None:
        e, p = (statistics.median(self.times[k]) for k in ("engine", "pytorch"))
        self.chosen = "engine" if e < p else "pytorch"
        self._run = self.engine if self.chosen == "engine" else self.eager
        self.on_choice(self.chosen, e * 1e3, p * 1e3)


def eager_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` that partitioning (which rewrites its graph in place) leaves as it is: the
    PyTorch side of a MeasuredChoice. Attributes (lifted constants) are shared, not copied."""
    import copy

    return fx.GraphModule(gm, copy.deepcopy(gm.graph))
