"""Random ops in the engine (docs/training.md, "Dropout"): dropout's mask from the engine's
counter-based generator (Philox4x32-10, src/kernels/philox.h) instead of torch's.

A graph with dropout gets, before partitioning (`engine_rng_in`):
- one `updraft.seed()` node at its top, which runs in PyTorch at each call and draws one i64
  from torch's default generator: `torch.manual_seed` repeats a run, and each call differs;
- each `aten.native_dropout(x, p, train=True)` as `updraft.dropout(x, p, seed, stream)`, and
  each `aten.bernoulli.p(x, p)` (stochastic depth's per-sample flags) as
  `updraft.bernoulli(x, p, seed, stream)`, with `stream` the op's position among them. The engine lowers it to `bernoulli` (the
  keep mask, true with probability 1 - p) and `x * mask * (1 / (1 - p))`, as ATen computes it;
  the PyTorch side of the op (a partition that falls back) draws the same mask through the
  bindings, so the engine and PyTorch agree bit for bit on every call.

Masks cannot equal eager PyTorch's (a different generator; Inductor's differ too): parity tests
use p = 0, and tests of p > 0 check the rate, the scaling and the gradient's use of the mask.

Not rewritten: backward graphs (AOTAutograd saves the forward's mask; a dropout recomputed in
a backward must reuse the forward's draw, which a fresh seed would not), dropout with a
symbolic p, and training=False (an identity, which ATen's kernel handles).
"""
from __future__ import annotations

import torch
from torch import fx

from .lowerer import Unsupported, bind_args, meta, register

aten = torch.ops.aten


@torch.library.custom_op("updraft::seed", mutates_args=())
def seed() -> torch.Tensor:
    """One draw from torch's default CPU generator, as an i64 scalar: the seed of one call's
    random ops."""
    return torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64)


@seed.register_fake
def _seed_fake() -> torch.Tensor:
    return torch.empty((), dtype=torch.int64)


def draw_mask(shape, prob: float, seed_value: int, stream: int) -> torch.Tensor:
    """The engine's `bernoulli` (bool, true with probability `prob`) for `seed_value` and
    `stream`, drawn in PyTorch through the bindings: the engine's bits exactly."""
    from . import _C

    mask = torch.empty(shape, dtype=torch.bool)
    _C.bernoulli_fill(mask.data_ptr(), mask.numel(), prob, seed_value, stream)
    return mask


def keep_mask(shape, p: float, seed_value: int, stream: int) -> torch.Tensor:
    """Dropout's keep mask: true with probability 1 - p."""
    return draw_mask(shape, 1.0 - p, seed_value, stream)


def _scale(p: float) -> float:
    keep = 1.0 - p
    return 0.0 if keep == 0 else 1.0 / keep  # ATen's: p = 1 gives zeros, not NaN


@torch.library.custom_op("updraft::dropout", mutates_args=())
def dropout(x: torch.Tensor, p: float, seed: torch.Tensor, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """aten.native_dropout(x, p, train=True) with the engine's mask: (x * mask * scale, mask)."""
    mask = keep_mask(x.shape, p, int(seed), stream)
    return x.mul(mask).mul_(_scale(p)), mask


@dropout.register_fake
def _dropout_fake(x, p, seed, stream):
    return torch.empty_like(x), torch.empty(x.shape, dtype=torch.bool)


@torch.library.custom_op("updraft::bernoulli", mutates_args=())
def bernoulli(x: torch.Tensor, p: float, seed: torch.Tensor, stream: int) -> torch.Tensor:
    """aten.bernoulli.p(x, p) with the engine's bits: 1 with probability p, in x's dtype and
    shape (x's values unread). Stochastic depth draws its per-sample keep flags with it."""
    return draw_mask(x.shape, p, int(seed), stream).to(x.dtype)


@bernoulli.register_fake
def _bernoulli_fake(x, p, seed, stream):
    return torch.empty_like(x)


SEED = torch.ops.updraft.seed.default
DROPOUT = torch.ops.updraft.dropout.default
BERNOULLI = torch.ops.updraft.bernoulli.default


def _probability(p) -> bool:
    return isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= float(p) <= 1.0


def _rewrite_of(node: fx.Node):
    """(new target, x, p) for a random op this module takes over (its call is target(x, p, seed,
    stream)), else None."""
    if node.op != "call_function":
        return None
    val = meta(node)
    if node.target is aten.native_dropout.default:
        a = bind_args(node)
        if (a["train"] is not False and _probability(a["p"]) and isinstance(val, (list, tuple)) and len(val) == 2
                and isinstance(val[0], torch.Tensor) and val[0].device.type == "cpu" and val[1].dtype == torch.bool):
            return DROPOUT, a["input"], float(a["p"])
    if node.target is aten.bernoulli.p:
        a = bind_args(node)
        if (a["generator"] is None and _probability(a["p"]) and isinstance(val, torch.Tensor)
                and val.device.type == "cpu" and val.dtype.is_floating_point):
            return BERNOULLI, a["self"], float(a["p"])
    return None


def engine_rng_in(gm: fx.GraphModule) -> int:
    """Rewrites the graph's train-mode dropouts and bernoulli draws as above (one seed node, one
    stream each); returns how many. Call on forward and inference graphs only (see the module docstring)."""
    draws = [(n, r) for n in gm.graph.nodes if (r := _rewrite_of(n)) is not None]
    if not draws:
        return 0
    graph = gm.graph
    first = next(n for n in graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        s = graph.call_function(SEED, ())
    _, (_, x0, _) = draws[0]
    fake, zero = getattr(meta(x0), "fake_mode", None), torch.empty((), dtype=torch.int64)
    s.meta["val"] = fake.from_tensor(zero) if fake is not None else zero
    for stream, (n, (target, x, p)) in enumerate(draws):
        with graph.inserting_before(n):
            new = graph.call_function(target, (x, p, s, stream))
        new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        graph.erase_node(n)
    gm.recompile()
    return len(draws)


@register(SEED)
def _seed_lowering(lw, node, a):
    raise Unsupported("draws the call's seed from torch's generator: one value per call, in PyTorch by design")


@register(DROPOUT)
def _dropout_lowering(lw, node, a):
    """bernoulli (keep with probability 1 - p) and x * mask * scale, the mask's cast and both
    multiplies fused into one pass by the engine (fuse_elementwise)."""
    x, p = a["x"], float(a["p"])
    dt = meta(x).dtype
    mask = lw.emit1("bernoulli", [lw.value(x), lw.value(a["seed"])], p=1.0 - p, stream=int(a["stream"]))
    kept = lw.emit1("mul", [lw.value(x), lw.cast(mask, dt)])
    return [lw.emit1("mul", [kept, lw.scalar(_scale(p), dt)]), mask]


@register(BERNOULLI)
def _bernoulli_lowering(lw, node, a):
    mask = lw.emit1("bernoulli", [lw.value(a["x"]), lw.value(a["seed"])], p=float(a["p"]), stream=int(a["stream"]))
    return lw.cast(mask, meta(a["x"]).dtype)
