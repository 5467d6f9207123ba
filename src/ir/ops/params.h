// Attribute interpretation shared by the shape functions (src/ir/ops/{reduction,norm,
// data_movement,compute}.cpp), the passes and the kernels that run those ops
// (src/kernels/{ref,cpu,onednn}/...), so they can never disagree on what `dims`,
// `start`/`end`, `pads` or an epilogue mean.
//
//   auto mask = reduce_mask(node.attr("dims").ints(), rank, "sum");  // which dims reduce
//   SliceRange r = slice_range(size, start, end, step);              // PyTorch clamping
//   Epilogue ep = Epilogue::of(node, 2);                              // conv2d/linear/matmul
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/elementwise_program.h"
#include "ir/op_table.h"

namespace updraft {

// linear_wq's quantize_x (CompilerConfig.activation_dtype="int8", src/ir/ops/quantized.cpp)
// multiplies int8 rows of x by int8 weights with exact int32 sums: K * 127 * 127 (and the VNNI
// kernels' K * 255 * 127, their x offset by 128) stays below 2^31 up to this K.
constexpr int64_t kQuantizeXMaxK = 65536;

// An int4 weight (quantize_int4, linear_wq over a u8 w) has one scale per kInt4Group consecutive
// values of a row, and its bytes hold two groups at a time: K is a multiple of kInt4Block. The
// byte format is kernels/quantize.h's (quantize_block_int4).
constexpr int64_t kInt4Group = 32;
constexpr int64_t kInt4Block = 2 * kInt4Group;

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

// A spatial attribute (kernel, stride, padding, dilation) as [h, w]: a single value applies to
// both dims, as in PyTorch. The shape functions validate them (ir/ops/compute.cpp).
inline std::vector<int64_t> spatial_pair(const Attr& a) {
  std::vector<int64_t> v = a.ints();
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

// A pooling node's window (max_pool2d, max_pool2d_indices, avg_pool2d): kernel, stride (an
// empty stride means "same as kernel", aten's default), padding, and dilation (1 for ops
// without one). d is PyTorch's dilation (>= 1).
struct PoolWindow {
  int64_t k[2], s[2], p[2], d[2];

  static PoolWindow of(const Node& n, bool has_dilation) {
    auto k = spatial_pair(n.attr("kernel"));
    auto s = n.attr("stride").ints().empty() ? k : spatial_pair(n.attr("stride"));
    auto p = spatial_pair(n.attr("padding"));
    auto d = has_dilation ? spatial_pair(n.attr("dilation")) : std::vector<int64_t>{1, 1};
    PoolWindow w{};
    for (int i = 0; i < 2; ++i) w.k[i] = k[i], w.s[i] = s[i], w.p[i] = p[i], w.d[i] = d[i];
    return w;
  }
};

// A channel-blocked layout (kernels/channel_block.h) of an NCHW value: `block` is 0 (plain)
// or must divide the static channel count. Used by channel_block and conv2d's src/dst_block.
inline void check_channel_block(InferCtx& c, const Shape& x, int64_t block, const char* what) {
  if (block == 0) return;
  if (block < 0) c.fail(std::string(what) + " is " + std::to_string(block) + "; use 0 (plain) or a block size");
  if (x.size() != 4) c.fail("x is " + shape_str(x) + "; a channel-blocked layout needs NCHW (rank 4)");
  if (!x[1].is_static() || x[1].value() % block != 0)
    c.fail("x has " + x[1].str() + " channels, not a multiple of " + std::string(what) + "=" + std::to_string(block));
}

// The epilogue of conv2d / linear / matmul (docs/ops.md, "Compute"): act(op + bias + residual).
// The activation is an elementwise op whose row allows it (ir/elementwise_ops.def, epi != no),
// with act_alpha / act_beta as its immediate operands (clamp: min, max; leaky_relu: the slope);
// kernels evaluate it with that op's formula.
struct Epilogue {
  bool has_bias = false, has_residual = false;
  std::optional<EwOp> act;     // nullopt: activation "none"
  double alpha = 0, beta = 0;  // act_alpha, act_beta
  int bias_input = -1, residual_input = -1;  // input indices, -1 when absent

  static bool known_activation(const std::string& name) { return name == "none" || ew_activation_from_name(name); }
  static std::string unknown_activation(const std::string& name) {
    return "activation '" + name + "' is unknown; use one of none, " + ew_activation_names();
  }
  // The activation attribute's op: nullopt for "none"; throws for a name that is not one.
  static std::optional<EwOp> activation(const std::string& name) {
    UPDRAFT_CHECK(known_activation(name), "epilogue", unknown_activation(name));
    return name == "none" ? std::nullopt : ew_activation_from_name(name);
  }
  // From a node's attributes; `num_main` inputs precede the bias and the residual.
  static Epilogue of(const Node& n, int num_main) {
    Epilogue e;
    e.has_bias = n.attr("has_bias").b();
    e.has_residual = n.attr("has_residual").b();
    e.act = activation(n.attr("activation").s());
    e.alpha = n.attr("act_alpha").f();
    e.beta = n.attr("act_beta").f();
    int k = num_main;
    if (e.has_bias) e.bias_input = k++;
    if (e.has_residual) e.residual_input = k;
    return e;
  }
  // The activation's operands after x: its immediates, alpha then beta.
  int num_act_params() const { return act ? ew_op_info(*act).arity - 1 : 0; }
};

// Whether permute `dims` swaps the dims at positions a and b counted from the end (-1 is the
// last) and keeps every other dim in place (negative dims in the list count from the end too):
// a transpose that fold passes can turn into strided reads (fold_transpose_matmul: -2 and -1;
// fold_permute_sdpa: -3 and -2).
inline bool swaps_two_dims(const std::vector<int64_t>& dims, int64_t a, int64_t b) {
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r < -a || r < -b) return false;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + r : dims[i];
    const int64_t want = i == r + a ? r + b : i == r + b ? r + a : i;
    if (d != want) return false;
  }
  return true;
}

// matmul's transpose_a / transpose_b (passes/fold_transpose_matmul.h): the operand is read as
// the view with its last two dims swapped in sizes and strides, so a transposed operand costs
// no copy. The reference and f64 kernels read it through this; oneDNN's puts the same swap in
// its memory descriptors (kernels/onednn/matmul.cpp).
inline TensorView last_two_swapped(TensorView t) {
  std::swap(t.sizes[t.ndim - 1], t.sizes[t.ndim - 2]);
  std::swap(t.strides[t.ndim - 1], t.strides[t.ndim - 2]);
  return t;
}

// sdpa's `seq_first`: which of q (0), k (1), v (2) and the result (3) are laid out
// [..., S, H, E], sequence before heads, as a projection's rows are before the heads are
// transposed out (passes/fold_permute_sdpa.h). sdpa computes on each as the view with its dims
// -3 and -2 swapped ([..., H, S, E]): shape inference on swapped shapes, kernels on swapped
// views (TensorView strides), so a seq_first operand costs no copy.
struct SdpaLayout {
  std::array<bool, 4> seq_first{};

  static SdpaLayout of(const std::vector<int64_t>& list) {
    SdpaLayout l;
    for (int64_t i : list) {
      if (i < 0 || i > 3) throw Error("sdpa", "seq_first holds " + std::to_string(i) + "; its entries are 0 (q), 1 (k), 2 (v) and 3 (the result)");
      if (l.seq_first[static_cast<size_t>(i)]) throw Error("sdpa", "seq_first lists " + std::to_string(i) + " twice; list each operand once");
      l.seq_first[static_cast<size_t>(i)] = true;
    }
    return l;
  }
  bool any() const { return seq_first[0] || seq_first[1] || seq_first[2] || seq_first[3]; }
  // Operand i's dims as sdpa computes on them: a shape ([..., H, S, E] from [..., S, H, E]).
  template <class Dims>
  Dims logical(int i, Dims dims) const {
    const size_t n = dims.size();
    if (seq_first[static_cast<size_t>(i)] && n >= 3) std::swap(dims[n - 3], dims[n - 2]);
    return dims;
  }
  // ... and a view of its memory: the same two dims swapped in sizes and strides.
  TensorView logical(int i, TensorView t) const {
    if (seq_first[static_cast<size_t>(i)] && t.ndim >= 3) {
      std::swap(t.sizes[t.ndim - 3], t.sizes[t.ndim - 2]);
      std::swap(t.strides[t.ndim - 3], t.strides[t.ndim - 2]);
    }
    return t;
  }
};

}  // namespace updraft
