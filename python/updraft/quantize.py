"""Store a model's linear weights compactly, in the model itself (docs/quantization.md).

`CompilerConfig(weight_dtype=...)` makes the *engine* hold int8, int4 or bf16 copies; the user's f32
parameters stay, because PyTorch still needs them (fallback, recompiles, state_dict). This is the
other form: `quantize_weights(model, "int8")` replaces the model's large linear layers and
embeddings by `QuantizedLinear` / `QuantizedEmbedding` modules that keep only the compact weight.
The f32 weights are released, eager PyTorch computes with the same values as the engine (int8
through `aten._weight_int8pack_mm`, bf16 widened), and `torch.compile(model, backend="updraft")`
runs those linears on the engine's int8 / bf16 kernels, reading the module's buffers in place
(linear_wq: int8pack is lowered to it, a bf16 widening folded into it by `fold_dequant_linear`).
One copy of each weight, at 1/4 (int8) or 1/2 (bf16) of its f32 size.

"int4" stores the engine's int4 format (`CompilerConfig(weight_dtype="int4")`, src/kernels/quantize.h)
in the module, at about 1/7 of the f32 size: eager PyTorch has no matmul for it, so the layer calls
the custom op `torch.ops.updraft.linear_int4`, which the engine lowers to linear_wq and eager
PyTorch runs by widening the weight a block of rows at a time (correct, and several times slower
than f32 eager: an int4 model is meant to run compiled).

The trade-off: the f32 weights are gone for good (save a state_dict first to keep them); the
model then *is* the quantised model, in eager too, and every consumer of its state_dict sees
`qweight` / `scale` instead of `weight`. The int8 format is the engine's: per output channel,
symmetric, scale = max|w| / 127, q = round-half-even(w / scale) in [-127, 127], so a model
quantised here computes what `weight_dtype="int8"` computes on the f32 model.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import INT4_BLOCK, INT4_GROUP, INT4_ROWS_RULE, WEIGHT_DTYPES

# The engine's compact forms a model can hold itself: one vocabulary with CompilerConfig.weight_dtype.
DTYPES = tuple(d for d in WEIGHT_DTYPES if d != "f32")
# The engine's threshold for converting weights (src/passes/quantize_weights.h,
# kMinQuantizedWeight): a smaller weight fits in a core's L2, so its f32 kernel is the faster one.
MIN_ELEMENTS = 1 << 16


def quantize_rows_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 of a 2-d f32 tensor, bit for bit the engine's `quantize_rows`
    (src/kernels/quantize.h): returns (q int8 [N, K], scale f32 [N]). A row of zeros has scale
    0; +-inf saturate to +-127; NaN becomes 0. Works through the rows in blocks of about 1M
    elements, so the temporaries stay small next to the weight."""
    w = w.detach()
    n, k = w.shape
    q = torch.empty((n, k), dtype=torch.int8, device=w.device)
    scale = torch.empty((n,), dtype=torch.float32, device=w.device)
    step = max(1, (1 << 20) // max(k, 1))
    zero = torch.zeros((), dtype=torch.float32, device=w.device)
    for r0 in range(0, n, step):
        b = w[r0:r0 + step].to(torch.float32)
        s = torch.where(torch.isfinite(b), b.abs(), zero).amax(dim=1) / 127.0
        r = torch.round(b / torch.where(s == 0, torch.ones_like(s), s)[:, None])  # half to even, as nearbyint
        r = torch.where(torch.isinf(b), torch.sign(b) * 127.0, r)
        r = torch.where(torch.isnan(b) | (s == 0)[:, None], zero, r)
        q[r0:r0 + step] = r.clamp_(-127, 127).to(torch.int8)
        scale[r0:r0 + step] = s
    return q, scale


def quantize_rows_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-wise symmetric int4 of a 2-d f32 tensor [N, K] (K a multiple of 64), bit for bit the
    engine's `quantize_block_int4` (src/kernels/quantize.h): returns (q uint8 [N, K/2], scale
    bfloat16 [N, K/32]). Per group of 32 values scale = bf16(max|g| / 7) over its finite values,
    q = round-half-even(g / scale) in [-7, 7] (by the rounded scale) stored as q + 8; byte i of a
    32-byte block holds element i of its first group (low nibble) and of its second (high
    nibble). NaN and a group of zeros give q = 0, +-inf +-7. Works in blocks of about 1M
    elements, as quantize_rows_int8."""
    w = w.detach()
    n, k = w.shape
    if k % INT4_BLOCK:
        raise ValueError(f"[updraft.quantize] int4 needs rows whose length is a multiple of {INT4_BLOCK}, got {k}")
    q = torch.empty((n, k // 2), dtype=torch.uint8, device=w.device)
    scale = torch.empty((n, k // INT4_GROUP), dtype=torch.bfloat16, device=w.device)
    step = max(1, (1 << 20) // k)
    zero = torch.zeros((), dtype=torch.float32, device=w.device)
    for r0 in range(0, n, step):
        g = w[r0:r0 + step].to(torch.float32).reshape(-1, k // INT4_GROUP, INT4_GROUP)
        s = (torch.where(torch.isfinite(g), g.abs(), zero).amax(dim=2) / 7.0).to(torch.bfloat16).to(torch.float32)
        r = torch.round(g / torch.where(s == 0, torch.ones_like(s), s)[..., None])
        r = torch.where(torch.isinf(g), torch.sign(g) * 7.0, r)
        r = torch.where(torch.isnan(g) | (s == 0)[..., None], zero, r)
        nib = (r.clamp_(-7, 7) + 8).to(torch.uint8).reshape(-1, k // INT4_BLOCK, 2, INT4_GROUP)
        q[r0:r0 + step] = (nib[:, :, 0] | (nib[:, :, 1] << 4)).reshape(-1, k // 2)
        scale[r0:r0 + step] = s.to(torch.bfloat16)
    return q, scale


def dequantize_int4(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The f32 values [n, K] of int4 rows q [n, K/2] with their bf16 scales [n, K/32] (any leading
    dims: an embedding's gathered rows)."""
    lead, half = q.shape[:-1], q.shape[-1]
    # Written with ops the engine runs (int32 and, f32 arithmetic; no uint8 bitwise ops or shifts):
    # a compiled QuantizedEmbedding("int4") widens its gathered rows in the engine. Exact in f32.
    b = q.reshape(*lead, half // INT4_GROUP, 1, INT4_GROUP).to(torch.int32)
    lo = (b & 0xF).to(torch.float32)
    nib = torch.cat((lo, (b.to(torch.float32) - lo) * (1.0 / 16)), dim=-2) - 8.0  # [.., blocks, 2 groups, 32]
    s = scale.to(torch.float32)[..., None]
    return (nib.reshape(*lead, 2 * half // INT4_GROUP, INT4_GROUP) * s).reshape(*lead, 2 * half)


# Rows of an int4 weight widened at a time by eager PyTorch's linear_int4: 4 MB of f32.
_INT4_EAGER_ELEMENTS = 1 << 20


@torch.library.custom_op("updraft::linear_int4", mutates_args=())
def linear_int4(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] f32 @ W^T for an int4 weight W (qweight uint8 [N, K/2], scale bfloat16 [N, K/32],
    the engine's layout): the matmul of QuantizedLinear("int4"). The engine runs it as linear_wq over
    the stored bytes; here eager PyTorch widens a block of rows at a time (no f32 copy of the whole
    weight), which costs a pass over the weight's f32 values per call."""
    n = qweight.shape[0]
    step = max(1, _INT4_EAGER_ELEMENTS // max(2 * qweight.shape[1], 1))
    if step >= n:
        return F.linear(x, _widen_int4(qweight, scale).to(x.dtype))
    return torch.cat([F.linear(x, _widen_int4(qweight[r0:r0 + step], scale[r0:r0 + step]).to(x.dtype))
                      for r0 in range(0, n, step)], dim=-1)


def _widen_int4(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """dequantize_int4's values for eager PyTorch's linear_int4, with the nibbles split by uint8
    ops (a byte per value where dequantize_int4's engine-friendly int32 form moves four): 0.27 ms
    per million values against 0.45-0.8 at 2 threads (docs/BENCHMARKS.md, session 50)."""
    n, half = q.shape
    b = q.reshape(n, half // INT4_GROUP, 1, INT4_GROUP)
    u = torch.cat((b & 0xF, b >> 4), dim=2).to(torch.float32).reshape(n, 2 * half // INT4_GROUP, INT4_GROUP)
    return ((u - 8.0) * scale.to(torch.float32)[..., None]).reshape(n, 2 * half)


@linear_int4.register_fake
def _linear_int4_shape(x, qweight, scale):
    return x.new_empty((x.shape[0], qweight.shape[0]))


class _Compact(nn.Module):
    """The stored form of one weight [rows, cols]: `qweight` (int8 with a per-row `scale`, int4
    as uint8 [rows, cols / 2] with a bf16 `scale` per group of 32, or bf16) and how to widen it.
    A weight that two modules share (an embedding tied to the output projection: its rows are the
    vocabulary for both) is quantised once and its buffers shared."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor | None, dtype: str):
        super().__init__()
        self.dtype = dtype
        self.register_buffer("qweight", qweight)
        if scale is not None:
            self.register_buffer("scale", scale)
        else:
            self.scale = None

    @staticmethod
    def stored_dtype(weight: torch.Tensor, dtype: str) -> str:
        """The form `dtype` stores this weight in: int4 rows must fill whole blocks, else int8."""
        return "int8" if dtype == "int4" and weight.shape[1] % INT4_BLOCK else dtype

    @staticmethod
    def quantize(weight: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        if dtype == "int8":
            return quantize_rows_int8(weight)
        if dtype == "int4":
            return quantize_rows_int4(weight)
        return weight.detach().to(torch.bfloat16).contiguous(), None

    def dequantized(self) -> torch.Tensor:
        """The f32 weight this layer computes with."""
        if self.dtype == "int4":
            return dequantize_int4(self.qweight, self.scale)
        w = self.qweight.to(torch.float32)
        return w * self.scale[:, None] if self.scale is not None else w

    def stored_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in (self.qweight, self.scale) if b is not None)


class QuantizedLinear(_Compact):
    """A linear layer whose weight is stored as int8 with a per-output-channel scale
    (`qweight` [out, in], `scale` [out]), as int4 (`qweight` uint8 [out, in / 2], `scale` bf16
    [out, in / 32]) or as bf16 (`qweight` only). `forward` runs int8 through
    `aten._weight_int8pack_mm`, int4 through `updraft::linear_int4` and widens bf16 for F.linear;
    the engine reads `qweight` as it is (linear_wq) in all three cases."""

    def __init__(self, qweight, scale, bias: nn.Parameter | None, dtype: str):
        super().__init__(qweight, scale, dtype)
        self.out_features = qweight.shape[0]
        self.in_features = qweight.shape[1] * (2 if dtype == "int4" else 1)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is None:  # bf16: widened here (the engine reads it as bf16: fold_dequant_linear)
            return F.linear(x, self.qweight.to(x.dtype), self.bias)
        if torch.is_grad_enabled() and x.requires_grad:
            # _weight_int8pack_mm has no derivative: widened, so the gradient reaches x (training
            # the layers before this one, or adapters beside it); the weight itself stays frozen.
            return F.linear(x, self.dequantized().to(x.dtype), self.bias)
        if self.dtype == "int4":  # the engine lowers it to linear_wq over the stored bytes
            y = torch.ops.updraft.linear_int4(x.reshape(-1, self.in_features), self.qweight, self.scale)
        else:
            # int8: PyTorch's weight-only int8 matmul reads the int8 weight as it is (no f32 copy
            # per call, ~4x faster in eager than widening it); the engine lowers it to linear_wq.
            y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, self.in_features), self.qweight,
                                                   self.scale.to(x.dtype))
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, " \
               f"dtype={self.dtype}"


class QuantizedEmbedding(_Compact):
    """An embedding whose table is stored as int8 with a per-row scale, as int4 (scales per group
    of 32) or as bf16: `forward` gathers the compact rows (and their scales) and widens only
    those, so the f32 table never exists."""

    def __init__(self, qweight, scale, dtype: str):
        # No padding_idx: it only masks the gradient of a table, and this one is frozen.
        super().__init__(qweight, scale, dtype)
        self.num_embeddings = qweight.shape[0]
        self.embedding_dim = qweight.shape[1] * (2 if dtype == "int4" else 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.dtype == "int4":
            return dequantize_int4(F.embedding(ids, self.qweight), F.embedding(ids, self.scale))
        rows = F.embedding(ids, self.qweight).to(torch.float32)
        return rows * F.embedding(ids, self.scale[:, None]) if self.scale is not None else rows

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, dtype={self.dtype}"


@dataclass
class QuantizeSummary:
    """What `quantize_weights` did: which layers it converted and what it left, with why."""

    dtype: str
    converted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # module name -> reason
    f32_bytes: int = 0       # the converted weights as they were
    stored_bytes: int = 0    # the same weights now (with their scales)
    copied_from_files: int = 0  # tensors left as they are, copied out of a mapped file so it can close
    as_int8: list[str] = field(default_factory=list)  # int4 asked, int8 stored: rows not whole int4 blocks

    def __str__(self) -> str:
        mb = 1 << 20
        lines = [f"updraft.quantize_weights({self.dtype}): {len(self.converted)} layer(s), "
                 f"{self.f32_bytes / mb:.1f} MB of weights as f32 -> {self.stored_bytes / mb:.1f} MB"]
        if self.as_int8:
            lines.append(f"  stored as int8, not int4 ({INT4_ROWS_RULE}): {_first_names(self.as_int8)}")
        if self.copied_from_files:
            lines.append(f"  {self.copied_from_files} tensor(s) left as they are copied out of the mapped checkpoint "
                         "file, so that its pages are released")
        reasons: dict[str, list[str]] = {}
        for name, why in self.skipped.items():
            reasons.setdefault(why, []).append(name)
        for why, names in reasons.items():
            lines.append(f"  left as they are ({why}): {_first_names(names)}")
        return "\n".join(lines)


def _first_names(names: list[str]) -> str:
    """The first four names, and how many more."""
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _layer(module: nn.Module, embeddings: bool):
    """(kind, weight as [rows, cols]) for a layer this converts, else None. Rows are output
    channels of a linear and vocabulary entries of an embedding: the dim a scale is per.
    nn.Linear; transformers' Conv1D (GPT-2 family), which stores its weight [in, out]; and
    nn.Embedding without max_norm (which rewrites the table in forward)."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor):
        return None
    if type(module) is nn.Linear:
        return "linear", w
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        return "linear", w.t()
    if embeddings and type(module) is nn.Embedding and module.max_norm is None:
        return "embedding", w
    return None


def _why_not(name: str, w: torch.Tensor, skip, min_elements: int) -> str | None:
    if not name:
        return "the model is the layer itself; quantize a module that holds it"
    if any(fnmatch.fnmatchcase(name, pat) for pat in skip):
        return "skip"
    if w.dtype != torch.float32:
        return f"weight is {w.dtype}, not float32"
    if w.numel() < min_elements:
        return f"fewer than {min_elements} elements"
    if w.device.type != "cpu":
        return f"on {w.device.type}; the engine runs on the CPU"
    return None


def quantize_weights(model: nn.Module, dtype: str = "int8", *, min_elements: int = MIN_ELEMENTS,
                     skip: tuple[str, ...] | list[str] = (), embeddings: bool = True) -> QuantizeSummary:
    """Replaces the large linear layers and embeddings of `model` (in place) by `QuantizedLinear`
    / `QuantizedEmbedding` layers that store their weights as `dtype` ("int8": per row, symmetric;
    "int4": per group of 32, symmetric, int8 for a weight whose rows are not a multiple of 64
    long; "bf16"), releasing the f32 weights. Converted: nn.Linear, transformers' Conv1D and (unless
    embeddings=False) nn.Embedding with an f32 weight of at least `min_elements` elements. A
    weight several layers share (an embedding tied to the output projection) is stored once for
    all of them when each is such a layer with the same orientation; else all keep it. Left as
    they are: smaller weights, names matching a pattern in `skip` (fnmatch, e.g. "lm_head").
    Returns a summary (print it). Not reversible: the model computes with the compact weights
    from now on, in eager PyTorch too."""
    if dtype not in DTYPES:
        raise ValueError(f"[updraft.quantize] dtype {dtype!r} is not one of {list(DTYPES)}; "
                         "for float32, leave the model as it is")
    if not isinstance(model, nn.Module):
        raise TypeError(f"[updraft.quantize] expected an nn.Module, got {type(model).__name__}")
    if isinstance(skip, str):
        skip = (skip,)
    # Every owner of every parameter, so a shared weight is converted for all of them or none.
    owners: dict[int, list[tuple[str, nn.Module]]] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        for p in mod._parameters.values():
            if p is not None:
                owners.setdefault(id(p), []).append((name, mod))
    summary = QuantizeSummary(dtype)
    groups: list[list[tuple[str, nn.Module, str, torch.Tensor]]] = []
    seen: set[int] = set()
    for name, mod in model.named_modules(remove_duplicate=False):
        layer = _layer(mod, embeddings)
        if layer is None or id(mod.weight) in seen:
            continue
        seen.add(id(mod.weight))
        group, why = [], None
        for oname, omod in owners.get(id(mod.weight), [(name, mod)]):
            olayer = _layer(omod, embeddings)
            if olayer is None or omod.weight is not mod.weight:
                why = f"weight shared with {oname or 'the model'}, which is not a layer this converts"
                break
            if olayer[1].shape != layer[1].shape:
                why = f"weight shared with {oname}, which reads it transposed"
                break
            why = why or _why_not(oname, olayer[1], skip, min_elements)
            group.append((oname, omod, olayer[0], olayer[1]))
        if why:
            for oname, *_ in group or [(name,)]:
                summary.skipped[oname or "(the model)"] = why
        else:
            groups.append(group)
    del owners, seen
    while groups:  # one weight at a time, so each f32 weight goes before the next is converted
        group = groups.pop(0)
        stored = _Compact.stored_dtype(group[0][3], dtype)
        q, s = _Compact.quantize(group[0][3], stored)
        summary.f32_bytes += group[0][3].numel() * 4
        for name, mod, kind, _ in group:
            new = (QuantizedLinear(q, s, mod.bias, stored) if kind == "linear"
                   else QuantizedEmbedding(q, s, stored))
            if stored != dtype:
                summary.as_int8.append(name)
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
            summary.converted.append(name)
        summary.stored_bytes += new.stored_bytes()
        del group, mod, new, q, s
    summary.copied_from_files = _copy_out_of_file_maps(model)
    _return_freed_memory()
    return summary


def _file_mapped_ranges() -> list[tuple[int, int]]:
    """The address ranges of this process that map a file (Linux: /proc/self/maps), else []."""
    ranges = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    ranges.append((lo, hi))
    except OSError:
        return []
    return ranges


def _copy_out_of_file_maps(model: nn.Module) -> int:
    """Copies the tensors `model` still holds that live in a mapped file into memory of their
    own; returns how many. transformers' `from_pretrained` maps the safetensors file and its
    tensors are views of that one map, so a single tensor left in it (a norm's weight) keeps the
    whole file mapped, the pages of the weights just converted included: 0.59 GB of the 156M
    Llama's RSS (docs/BENCHMARKS.md). The tensors left are small next to the converted ones;
    each keeps its Parameter object (`.data` is replaced), so references to it stay valid."""
    ranges = _file_mapped_ranges()
    if not ranges:
        return 0
    copied, seen = 0, set()
    for mod in model.modules():
        for t in list(mod._parameters.values()) + list(mod._buffers.values()):
            if t is None or id(t) in seen or t.device.type != "cpu":
                continue
            seen.add(id(t))
            ptr = t.untyped_storage().data_ptr()
            if any(lo <= ptr < hi for lo, hi in ranges):
                with torch.no_grad():
                    t.data = t.data.clone()
                copied += 1
    return copied


def _return_freed_memory() -> None:
    """Hands the heap's free pages back to the OS (glibc's malloc_trim). Without it the f32
    weights just released stay in the process's RSS wherever a live allocation sits above them
    in the heap: 0.07 GB of the 156M Llama's 0.6 GB (docs/BENCHMARKS.md). Elsewhere a no-op."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
