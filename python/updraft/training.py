"""Training graphs (docs/training.md): what changes before AOTAutograd traces a training step,
and which of the engine or PyTorch runs each of its graphs.

- `is_training`: AOTAutograd's own test for making forward and backward graphs.
- `attention_as_math_in`: scaled_dot_product_attention with dropout in its math form, so its
  gradient is ops the engine runs (without dropout, torch's flash op and its backward stay).
- `MeasuredChoice`: CompilerConfig(training="auto") times the compiled training step (forward
  and backward) against eager over its first steps and keeps the faster (never slower than
  eager by choice); the same timing decides an inference graph that writes its inputs.

The backend (backend.py) compiles the graphs; this module decides nothing about partitioning.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import statistics
import threading
import time
from typing import Any, Callable, Iterator, Optional

import torch
from torch import fx

aten = torch.ops.aten


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


def _without_dropout(n: fx.Node) -> bool:
    """A scaled_dot_product_attention call whose dropout_p is a literal 0 (or left out)."""
    p = n.kwargs["dropout_p"] if "dropout_p" in n.kwargs else n.args[4] if len(n.args) > 4 else 0.0
    return isinstance(p, (int, float)) and not isinstance(p, bool) and p == 0


def attention_as_math_in(gm: fx.GraphModule) -> None:
    """Training graphs: Dynamo's scaled_dot_product_attention calls with dropout become
    `_attention_as_math` before AOTAutograd traces them (below autograd the op torch picks and
    its backward op would be fixed already: for dropout on the CPU, the math form anyway, with
    its dropout mask drawn by torch's generator where the engine draws its own). Calls without
    dropout keep torch's choice, on the CPU the flash op, whose backward the engine runs from
    q, k, v and each row's log-sum-exp instead of saving the [.., L, S] weights
    (lowering_nn.py, `_sdpa_flash_cpu_backward`)."""
    sdpa = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in sdpa and not _without_dropout(n):
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
# Engine calls in a row that built or instantiated a plan (a new input shape each: a decode
# step's growing cache) after which a MeasuredChoice stops timing and the engine keeps the graph.
SETUP_STREAK_LIMIT = 4


_engine_only = contextvars.ContextVar("updraft_engine_only", default=False)


@contextlib.contextmanager
def engine_only() -> Iterator[None]:
    """Inside it every MeasuredChoice runs its engine side, whatever it chose, and times nothing:
    for the tools that look at the engine (updraft.profile, updraft.debug's compare, dump_tensors
    and bisect), which would otherwise see PyTorch's side during the trials or after a choice."""
    token = _engine_only.set(True)
    try:
        yield
    finally:
        _engine_only.reset(token)


class MeasuredChoice:
    """Boxed callable choosing between two ways of running one graph by timing them: its first
    calls alternate between `engine` (updraft) and `eager` (PyTorch), starting with the engine;
    the first call of each is not timed, then TRIALS calls of each are. The side with the lower
    median runs every later call, and `on_choice(chosen, engine_ms, pytorch_ms)` records it
    (report, explain). Both sides compute the same values from the same inputs, so switching
    between calls is safe.

    prefer_engine=True: PyTorch is chosen only when its slowest timed call beat the engine's
    fastest (the ranges do not overlap), so a burst of load on a shared machine during the
    trials cannot send a faster engine graph to PyTorch for good; the medians are still reported.

    engine_setup: a counter of the engine's one-time work (plans built or instantiated for a new
    input shape); an engine call that moved it is not a trial, since later calls of that shape
    will not pay it, and the engine runs the next call too (PyTorch's side waits for a clean
    engine trial). After SETUP_STREAK_LIMIT such calls in a row (a decode step's growing cache
    makes every call a new shape) timing stops and the engine keeps the graph.

    backward=True (a training step): a call's time also counts its backward, timed by autograd
    hooks (`time_backward`) from the moment the backward reaches the call's outputs to the
    moment every input that needs grad has its gradient; a call whose backward has not run by
    the next call counts its forward alone. The hooks live only until the choice is made."""

    _boxed_call = True

    def __init__(self, engine: Callable, eager: Callable, on_choice: Callable[[str, float, float], None],
                 trials: int = TRIALS, clock: Callable[[], float] = time.perf_counter, backward: bool = False,
                 prefer_engine: bool = False, engine_setup: Optional[Callable[[], int]] = None) -> None:
        self.engine, self.eager, self.on_choice = engine, eager, on_choice
        self.trials, self.clock, self.backward, self.prefer_engine = trials, clock, backward, prefer_engine
        self.engine_setup = engine_setup
        self.times: dict = {"engine": [], "pytorch": []}
        self._next = "engine"  # the side the next call runs
        self._side_calls = {"engine": 0, "pytorch": 0}
        self._setup_streak = 0  # engine calls in a row that built a plan (engine_setup)
        self.chosen: Optional[str] = None
        self._run: Optional[Callable] = None
        self._pending: list = []  # [side, seconds] of calls whose backward has not run yet
        self._hooks: list = []
        self._lock = threading.Lock()

    def __call__(self, args: list) -> Any:
        if _engine_only.get():
            return self.engine(args)
        run = self._run
        if run is not None:
            return run(args)
        with self._lock:
            for trial in self._pending:  # no backward ran after that call: its forward is its cost
                self._record(trial)
            self._pending.clear()
            side = self._next
            if side == "engine" and self._setup_streak >= SETUP_STREAK_LIMIT:
                self._decide(give_up=True)  # a new shape every call: nothing clean to time
            first = self._side_calls[side] == 0
            self._side_calls[side] += 1
        if self._run is not None:
            return self._run(args)
        fn = self.engine if side == "engine" else self.eager
        setup = self.engine_setup() if side == "engine" and self.engine_setup is not None else None
        t0 = self.clock()
        out = fn(list(args))
        elapsed = self.clock() - t0
        with self._lock:
            if setup is not None and self.engine_setup() != setup:
                # This call built a plan: not what later calls of its shape cost. The engine
                # goes again, so PyTorch's side is never run for a graph that only ever builds.
                self._setup_streak += 1
                return out
            self._setup_streak = 0
            self._next = "pytorch" if side == "engine" else "engine"
        if not first:
            trial = [side, elapsed]
            with self._lock:
                hooks = time_backward(args, out, self.clock, lambda bw: self._finish(trial, bw)) \
                    if self.backward and self._run is None else None
                if hooks:
                    self._hooks += hooks
                    self._pending.append(trial)
                else:
                    self._record(trial)
        return out

    def _finish(self, trial: list, backward_s: float) -> None:
        with self._lock:
            if any(t is trial for t in self._pending):
                self._pending = [t for t in self._pending if t is not trial]
                trial[1] += backward_s
                self._record(trial)

    def _record(self, trial: list) -> None:
        """Under the lock."""
        if self._run is not None:
            return
        self.times[trial[0]].append(trial[1])
        if all(len(t) >= self.trials for t in self.times.values()):
            self._decide()

    def _decide(self, give_up: bool = False) -> None:
        e, p = (statistics.median(self.times[k]) if self.times[k] else math.nan for k in ("engine", "pytorch"))
        if give_up:
            self.chosen = "engine"
        elif self.prefer_engine:
            self.chosen = "pytorch" if max(self.times["pytorch"]) < min(self.times["engine"]) else "engine"
        else:
            self.chosen = "engine" if e < p else "pytorch"
        self._run = self.engine if self.chosen == "engine" else self.eager
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.on_choice(self.chosen, e * 1e3, p * 1e3)


def time_backward(args: list, out: Any, clock: Callable[[], float], on_done: Callable[[float], None]) -> list:
    """Hooks that time the backward of one call: from the first time autograd reaches one of the
    call's outputs (a pre-hook on its grad_fn) to the moment every input that needs grad has its
    gradient (a multi-grad hook); `on_done(seconds)` is called then. Returns the hook handles
    (empty when the call has no backward to time)."""
    outs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    ins = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if not outs or not ins:
        return []
    start: list = []

    def reached(grad_outputs: Any) -> None:
        if not start:
            start.append(clock())

    def done(grads: Any) -> None:
        on_done(clock() - start[0] if start else 0.0)

    handles = [o.grad_fn.register_prehook(reached) for o in outs]
    handles.append(torch.autograd.graph.register_multi_grad_hook(ins, done, mode="all"))
    return handles


def eager_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph that the rewrites before tracing (attention_as_math_in) leave as
    the user wrote it: the eager side of a training step's MeasuredChoice. Attributes are
    shared, not copied."""
    import copy

    return fx.GraphModule(gm, copy.deepcopy(gm.graph))
