// Attribute interpretation shared by the shape functions (src/ir/ops/{reduction,norm,
// data_movement}.cpp) and the kernels that run those ops (src/kernels/{ref,cpu}/...), so the
// two can never disagree on what `dims`, `start`/`end` or `pads` mean.
//
//   auto mask = reduce_mask(node.attr("dims").ints(), rank, "sum");  // which dims reduce
//   SliceRange r = slice_range(size, start, end, step);              // PyTorch clamping
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

// normalize_dim that also accepts dim 0 / -1 on a 0-d tensor (torch treats it as rank 1).
inline int wrap_dim(int64_t dim, int rank, const std::string& op) {
  return normalize_dim(dim, rank > 0 ? rank : 1, op);
}

// Which input dims a reduction removes. An empty list means every dim (torch's `dim=None`).
// A rank-0 input accepts dim 0 / -1 (as torch does) and reduces nothing.
inline std::vector<bool> reduce_mask(const std::vector<int64_t>& dims, int rank, const std::string& op) {
  std::vector<bool> mask(rank, dims.empty());
  for (int64_t d : dims) {
    int k = wrap_dim(d, rank, op);
    if (rank == 0) continue;
    if (mask[k]) throw Error(op, "dim " + std::to_string(d) + " appears twice in dims; list each dim once");
    mask[k] = true;
  }
  return mask;
}

// A slice of one dim after PyTorch's clamping: [start, start + len*step) with step > 0.
struct SliceRange {
  int64_t start = 0;
  int64_t len = 0;
};

// torch semantics: negative start/end count from the end; both clamp into [0, size]; an empty
// range (end <= start) has length 0. Huge `end` values (INT64_MAX from `x[a:]`) mean "to the end".
inline SliceRange slice_range(int64_t size, int64_t start, int64_t end, int64_t step) {
  if (step <= 0) throw Error("slice", "step must be positive, got " + std::to_string(step));
  auto clamp = [size](int64_t v) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return v > size ? size : v;
  };
  SliceRange r;
  r.start = clamp(start);
  int64_t e = clamp(end);
  r.len = e > r.start ? (e - r.start + step - 1) / step : 0;
  return r;
}

// Per dim (before, after) amounts of a constant pad, from torch's order (last dim first).
// Dims the list does not mention get (0, 0). Negative amounts crop, as in torch.
struct PadAmount {
  int64_t before = 0, after = 0;
};
inline std::vector<PadAmount> pad_amounts(const std::vector<int64_t>& pads, int rank) {
  if (pads.size() % 2 != 0)
    throw Error("pad", "pads has " + std::to_string(pads.size()) + " entries; it needs (before, after) pairs");
  if (static_cast<int>(pads.size() / 2) > rank)
    throw Error("pad", "pads covers " + std::to_string(pads.size() / 2) + " dims but the input has rank " +
                           std::to_string(rank));
  std::vector<PadAmount> r(rank);
  for (size_t i = 0; i < pads.size() / 2; ++i) r[rank - 1 - i] = {pads[2 * i], pads[2 * i + 1]};
  return r;
}

// A channel-blocked layout (kernels/channel_block.h) of an NCHW value: `block` is 0 (plain)
// or must divide the static channel count. Used by channel_block and conv2d's src/dst_block.
inline void check_channel_block(InferCtx& c, const Shape& x, int64_t block, const char* what) {
  if (block == 0) return;
  if (block < 0) c.fail(std::string(what) + " is " + std::to_string(block) + "; use 0 (plain) or a block size");
  if (x.size() != 4) c.fail("x is " + shape_str(x) + "; a channel-blocked layout needs NCHW (rank 4)");
  if (!x[1].is_static() || x[1].value() % block != 0)
    c.fail("x has " + x[1].str() + " channels, not a multiple of " + std::string(what) + "=" + std::to_string(block));
}

}  // namespace updraft
