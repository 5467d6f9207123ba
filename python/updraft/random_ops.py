"""Random ops in the engine (docs/training.md, "Dropout"): dropout's mask from the engine's
counter-based generator (Philox4x32-10, src/kernels/philox.h) instead of torch's.

A graph with dropout gets, before partitioning (`engine_rng_in`):
- one `updraft.seed()` node at its top, which runs in PyTorch at each call and draws one i64
  from torch's default generator: `torch.manual_seed` repeats a run, and each call differs;
- each `aten.native_dropout(x, p, train=True)` as `updraft.dropout(x, p, seed, stream)`, each
  `aten.bernoulli.p(x, p)` (torchvision's stochastic depth flags) as
  `updraft.bernoulli(x, p, seed, stream)`, each float32 `aten.rand(size)` / `rand_like(x)`
  (transformers' drop path: floor(keep + rand)) as `updraft.rand(size, seed, stream)`, and each
  float32 `aten.randn` / `randn_like` (a VAE's reparameterisation, noise inside a model) as
  `updraft.randn(size, seed, stream)`, with `stream` the op's position among them. The engine
  lowers dropout to `bernoulli` (the keep mask, true with probability 1 - p) and
  `x * mask * (1 / (1 - p))`, as ATen computes it, rand to `uniform` and randn to `normal`; the
  PyTorch side of each op (a partition that falls back) draws the same bits through the
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
from .lowering_shape import _broadcast_scalar

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


def _draw_float(fill: str, shape, seed_value: int, stream: int) -> torch.Tensor:
    """A float32 tensor filled by the bindings' `fill` (uniform_fill, normal_fill) for
    `seed_value` and `stream`: the engine op's bits, drawn in PyTorch."""
    from . import _C

    out = torch.empty(shape, dtype=torch.float32)
    getattr(_C, fill)(out.data_ptr(), out.numel(), seed_value, stream)
    return out


def draw_uniform(shape, seed_value: int, stream: int) -> torch.Tensor:
    """The engine's `uniform` (float32 in [0, 1))."""
    return _draw_float("uniform_fill", shape, seed_value, stream)


def draw_normal(shape, seed_value: int, stream: int) -> torch.Tensor:
    """The engine's `normal` (float32, standard normal)."""
    return _draw_float("normal_fill", shape, seed_value, stream)


def _float_draw_op(name: str, draw):
    """The custom op `updraft::name(size, seed, stream)`: aten.`name`(size) (float32, CPU) with
    the engine's bits, `draw`n through the bindings; its fake is an empty float32 of the size."""
    def run(size: list[int], seed: torch.Tensor, stream: int) -> torch.Tensor:
        return draw(size, int(seed), stream)

    op = torch.library.custom_op(f"updraft::{name}", run, mutates_args=())
    op.register_fake(lambda size, seed, stream: torch.empty(size, dtype=torch.float32))
    return op


rand = _float_draw_op("rand", draw_uniform)
randn = _float_draw_op("randn", draw_normal)


SEED = torch.ops.updraft.seed.default
DROPOUT = torch.ops.updraft.dropout.default
BERNOULLI = torch.ops.updraft.bernoulli.default
RAND = torch.ops.updraft.rand.default
RANDN = torch.ops.updraft.randn.default
# aten draws of floats -> the updraft op that takes each over (_rewrite_of).
_FLOAT_DRAWS = {aten.rand.default: RAND, aten.rand_like.default: RAND, aten.randn.default: RANDN,
                aten.randn_like.default: RANDN}


def _probability(p) -> bool:
    return isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= float(p) <= 1.0


def _static_size(val: torch.Tensor):
    size = list(val.shape)
    return size if all(isinstance(d, int) for d in size) else None


def _rewrite_of(node: fx.Node):
    """(new target, its leading arguments) for a random op this module takes over (its call is
    target(*arguments, seed, stream)), else None."""
    if node.op != "call_function":
        return None
    val = meta(node)
    if node.target is aten.native_dropout.default:
        a = bind_args(node)
        if (a["train"] is not False and _probability(a["p"]) and isinstance(val, (list, tuple)) and len(val) == 2
                and isinstance(val[0], torch.Tensor) and val[0].device.type == "cpu" and val[1].dtype == torch.bool):
            return DROPOUT, (a["input"], float(a["p"]))
    if node.target is aten.bernoulli.p:
        a = bind_args(node)
        if (a["generator"] is None and _probability(a["p"]) and isinstance(val, torch.Tensor)
                and val.device.type == "cpu" and val.dtype.is_floating_point):
            return BERNOULLI, (a["self"], float(a["p"]))
    if node.target in _FLOAT_DRAWS:
        # Contiguous float32 on the CPU with a static size (rand_like keeps x's strides, which
        # the op's dense output would not); the generator overloads (an explicit
        # torch.Generator) stay torch's.
        if (isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dtype == torch.float32
                and val.layout == torch.strided and _static_size(val) is not None and val.is_contiguous()):
            return _FLOAT_DRAWS[node.target], (_static_size(val),)
    return None


def _fake_mode_of(node: fx.Node):
    val = meta(node)
    val = val[0] if isinstance(val, (list, tuple)) else val
    return getattr(val, "fake_mode", None)


def engine_rng_in(gm: fx.GraphModule) -> int:
    """Rewrites the graph's train-mode dropouts, bernoulli draws and rands as above (one seed
    node, one stream each); returns how many. Call on forward and inference graphs only (see the module docstring)."""
    draws = [(n, r) for n in gm.graph.nodes if (r := _rewrite_of(n)) is not None]
    if not draws:
        return 0
    graph = gm.graph
    first = next(n for n in graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        s = graph.call_function(SEED, ())
    fake, zero = _fake_mode_of(draws[0][0]), torch.empty((), dtype=torch.int64)
    s.meta["val"] = fake.from_tensor(zero) if fake is not None else zero
    for stream, (n, (target, args)) in enumerate(draws):
        with graph.inserting_before(n):
            new = graph.call_function(target, (*args, s, stream))
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


def _draw_lowering(op: str):
    """The engine's `op` (uniform, normal) over a like of the size (its data unread: a
    broadcast zero)."""
    def lower(lw, node, a):
        like = _broadcast_scalar(lw, 0.0, torch.float32, [int(d) for d in a["size"]])
        return lw.emit1(op, [like, lw.value(a["seed"])], stream=int(a["stream"]))
    return lower


register(RAND)(_draw_lowering("uniform"))
register(RANDN)(_draw_lowering("normal"))
