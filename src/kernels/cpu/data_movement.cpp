// Fast CPU data-movement kernels, any dtype (by element size). Each op builds a source view
// of its input and a destination view of its output and hands both to copy_strided
// (kernels/cpu/strided_copy.h). Index ops validate every index on the calling thread before
// any parallel copy starts, so a bad index throws Error and nothing is read out of bounds.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "kernels/ref/ref_util.h"

namespace updraft {
namespace {
using cpu::copy_strided;
using cpu::parallel_for;
using cpu::narrow_view;

constexpr int64_t kParallelRows = 64;  // gather/embedding: fewer rows than this run serially

// Threads for copying `rows` blocks of `bytes` in all: one below kParallelRows rows or 256 KB.
int row_copy_threads(int64_t rows, int64_t bytes, int threads) {
  return rows >= kParallelRows && bytes >= (1 << 18) ? (threads > 0 ? threads : omp_get_max_threads()) : 1;
}

// out reinterpreted with the input's logical shape (reshape/copy keep row-major order).
TensorView as_shape(const TensorView& out, const TensorView& like) {
  return TensorView::contiguous(out.data, out.dtype, like.shape());
}

// `fn` sees the views and the thread count only, never the node's attributes.
KernelFactory fn_factory(const std::string& name, std::function<void(const TensorView*, TensorView*, int)> fn) {
  return [name, fn](const KernelContext& ctx) {
    int threads = ctx.num_threads;
    return make_view_kernel(name, [fn, threads](const TensorView* in, TensorView* out) { fn(in, out, threads); });
  };
}

void copy_fn(const TensorView* in, TensorView* out, int threads) {
  copy_strided(in[0], as_shape(out[0], in[0]), threads);
}

KernelFactory permute_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    std::vector<int> dims;
    for (int64_t d : ctx.node.attr("dims").ints()) dims.push_back(normalize_dim(d, rank, "permute"));
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_permute_blocked", [dims, threads](const TensorView* in, TensorView* out) {
      copy_strided(cpu::permute_view(in[0], dims), out[0], threads);
    });
  };
}

[[noreturn]] void throw_slice_mismatch(int64_t len, int dim, int64_t held) {
  throw Error("slice", "the bound sizes give " + std::to_string(len) + " elements along dim " + std::to_string(dim) +
                           ", the output holds " + std::to_string(held));
}

KernelFactory slice_factory() {
  return [](const KernelContext& ctx) {
    const Node& n = ctx.node;
    int dim = normalize_dim(n.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "slice");
    // ctx.attr: start/end may be symbolic in the graph; the plan passes them evaluated.
    int64_t start = ctx.attr("start").i(), end = ctx.attr("end").i(), step = n.attr("step").i();
    int threads = ctx.num_threads;
    // A symbolic start or end (x[:, s0 - 1:s0], a table cut at the length) is evaluated per call
    // from the running plan's binding (call_bindings), so the kernel keeps no size of its own and
    // one kernel serves every size of a range plan. Without a binding (a kernel run on its own)
    // it takes the values it was built with.
    const bool symbolic = n.attr("start").is_symbolic() || n.attr("end").is_symbolic();
    const Dim sd = n.attr("start").dim(), ed = n.attr("end").dim();  // static where the attribute is
    KernelFn fn = [=](const TensorView* in, TensorView* out) {
      const SymBindings* b = symbolic ? call_bindings() : nullptr;
      SliceRange r = slice_range(in[0].sizes[dim], b ? sd.eval(*b) : start, b ? ed.eval(*b) : end, step);
      if (r.len != out[0].sizes[dim]) throw_slice_mismatch(r.len, dim, out[0].sizes[dim]);
      copy_strided(narrow_view(in[0], dim, r.start, r.len, step), out[0], threads);
    };
    return symbolic ? make_view_kernel("cpu_slice", std::move(fn)) : make_generic_kernel("cpu_slice", std::move(fn));
  };
}

KernelFactory concat_factory() {
  return [](const KernelContext& ctx) {
    int dim = normalize_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "concat");
    int count = static_cast<int>(ctx.in_shapes.size()), threads = ctx.num_threads;
    return make_generic_kernel("cpu_concat", [=](const TensorView* in, TensorView* out) {
      int64_t at = 0;
      for (int k = 0; k < count; ++k) {
        copy_strided(in[k], narrow_view(out[0], dim, at, in[k].sizes[dim]), threads);
        at += in[k].sizes[dim];
      }
    });
  };
}

void expand_fn(const TensorView* in, TensorView* out, int threads) {
  // Broadcast view: new leading dims and size-1 dims read with stride 0.
  TensorView src = out[0];
  src.data = in[0].data;
  int lead = out[0].ndim - in[0].ndim;
  for (int d = 0; d < out[0].ndim; ++d) {
    int k = d - lead;
    src.strides[d] = (k < 0 || in[0].sizes[k] == 1) ? 0 : in[0].strides[k];
  }
  copy_strided(src, out[0], threads);
}

KernelFactory split_factory() {
  return [](const KernelContext& ctx) {
    int dim = normalize_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "split");
    std::vector<int64_t> sizes = ctx.node.attr("sizes").ints();
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_split", [=](const TensorView* in, TensorView* out) {
      int64_t total = 0;
      for (int64_t s : sizes) total += s;
      if (total != in[0].sizes[dim])
        throw Error("split", "sizes sum to " + std::to_string(total) + " but dim " + std::to_string(dim) +
                                 " has size " + std::to_string(in[0].sizes[dim]));
      int64_t at = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        copy_strided(narrow_view(in[0], dim, at, sizes[k]), out[k], threads);
        at += sizes[k];
      }
    });
  };
}

KernelFactory pad_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    auto amounts = pad_amounts(ctx.node.attr("pads").ints(), rank);
    auto fill = ref::scalar_bytes(ctx.in_dtype(0), ctx.node.attr("value").f(), "pad");
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_pad", [=](const TensorView* in, TensorView* out) {
      // Fill everything, then copy the part of the input that survives cropping into the
      // interior. Filling twice is cheaper than describing the border as many small views.
      cpu::fill_strided(out[0], fill.data(), threads);
      TensorView src = in[0], dst = out[0];
      for (int d = 0; d < rank; ++d) {
        int64_t skip_in = std::max<int64_t>(0, -amounts[d].before), skip_out = std::max<int64_t>(0, amounts[d].before);
        int64_t len = std::min(in[0].sizes[d] - skip_in, out[0].sizes[d] - skip_out);
        if (len <= 0) return;  // the input is cropped away entirely
        src = narrow_view(src, d, skip_in, len);
        dst = narrow_view(dst, d, skip_out, len);
      }
      copy_strided(src, dst, threads);
    });
  };
}

// Reads index k (logical order) of an i64/i32 index view and checks it against [0, size).
std::vector<int64_t> checked_indices(const std::string& op, const TensorView& idx, int64_t size) {
  std::vector<int64_t> r(idx.numel());
  for (int64_t k = 0; k < static_cast<int64_t>(r.size()); ++k) {
    r[k] = ref::index_at(idx, k);
    if (r[k] < 0 || r[k] >= size)
      throw Error(op, "index " + std::to_string(r[k]) + " is out of range for size " + std::to_string(size) +
                          "; indices must be in [0, " + std::to_string(size) + ")");
  }
  return r;
}

// out = x's slices at `picks` along `dim`, in order (index_select; embedding is dim 0 of a 2-d
// weight); out is contiguous, shaped like x with dim's size the number of picks. When the dims
// after `dim` are dense (and x is contiguous, or dim is 0), each (outer index, pick) is one
// block copied by memcpy: a copy_strided per pick cost ~25 ns of setup for a block of a few
// floats (Swin's relative position bias, 2401 picks of 3-24 floats in 10 calls: 0.6 ms a call).
// Otherwise (a transposed weight, say) one strided copy per pick.
void select_along(const TensorView& x, int dim, const std::vector<int64_t>& picks, const TensorView& out, int threads) {
  const int64_t n = static_cast<int64_t>(picks.size()), es = static_cast<int64_t>(dtype_size(x.dtype));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.sizes[d];
  bool dense = true;  // the dims after `dim`, in x
  for (int d = x.ndim - 1; d > dim; --d) {
    if (x.sizes[d] != 1 && x.strides[d] != inner) dense = false;
    inner *= x.sizes[d];
  }
  if (!dense || (dim > 0 && !x.is_contiguous())) {
    for (int64_t j = 0; j < n; ++j) copy_strided(narrow_view(x, dim, picks[j], 1), narrow_view(out, dim, j, 1), threads);
    return;
  }
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(out.data);
  const int64_t block = inner * es, pick_stride = x.strides[dim] * es, outer_stride = x.sizes[dim] * pick_stride;
  const int64_t rows = outer * n;
  parallel_for(rows, row_copy_threads(rows, rows * block, threads), [&](int64_t r) {
    const int64_t o = r / n, j = r % n;
    std::memcpy(dst + r * block, src + o * outer_stride + picks[j] * pick_stride, static_cast<size_t>(block));
  });
}

void embedding_fn(const TensorView* in, TensorView* out, int threads) {
  const TensorView& w = in[0];
  auto rows = checked_indices("embedding", in[1], w.sizes[0]);
  const int64_t n = static_cast<int64_t>(rows.size());
  select_along(w, 0, rows, TensorView::contiguous(out[0].data, w.dtype, {n, w.sizes[1]}), threads);
}

KernelFactory index_select_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = normalize_dim(ctx.node.attr("dim").i(), rank, "index_select");
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_index_select", [=](const TensorView* in, TensorView* out) {
      if (rank == 0) {  // torch: a 0-d input takes the single index 0
        checked_indices("index_select", in[1], 1);
        copy_strided(in[0], out[0], threads);
        return;
      }
      select_along(in[0], dim, checked_indices("index_select", in[1], in[0].sizes[dim]), out[0], threads);
    });
  };
}

// gather along dim: out[..., j, ...] = x[..., index[..., j, ...], ...] with out shaped like index.
template <typename T>
void gather_typed(const TensorView& x, const TensorView& idx_view, const std::vector<int64_t>& idx, int dim,
                  TensorView& out, int threads) {
  int rank = out.ndim;
  int64_t cols = rank ? out.sizes[rank - 1] : 1, rows = cols ? out.numel() / cols : 0;
  const T* src = x.ptr<const T>();
  T* dst = out.ptr<T>();
  int nt = rows >= kParallelRows && out.numel() >= 65536 ? (threads > 0 ? threads : omp_get_max_threads()) : 1;
  parallel_for(rows, nt, [&](int64_t r) {
    // x offset of this row, leaving out `dim` (added per element from the index).
    int64_t base = 0, rem = r;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t i = rem % out.sizes[d];
      rem /= out.sizes[d];
      if (d != dim) base += i * x.strides[d];
    }
    for (int64_t c = 0; c < cols; ++c) {
      int64_t e = r * cols + c;
      int64_t off = base + idx[e] * (rank ? x.strides[dim] : 0);
      if (dim != rank - 1 && rank) off += c * x.strides[rank - 1];
      dst[e] = src[off];
    }
  });
}

KernelFactory gather_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = normalize_dim(ctx.node.attr("dim").i(), rank, "gather");
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_gather", [=](const TensorView* in, TensorView* out) {
      auto idx = checked_indices("gather", in[1], rank ? in[0].sizes[dim] : 1);
      switch (dtype_size(in[0].dtype)) {
        case 1: return gather_typed<uint8_t>(in[0], in[1], idx, dim, out[0], threads);
        case 2: return gather_typed<uint16_t>(in[0], in[1], idx, dim, out[0], threads);
        case 4: return gather_typed<uint32_t>(in[0], in[1], idx, dim, out[0], threads);
        case 8: return gather_typed<uint64_t>(in[0], in[1], idx, dim, out[0], threads);
        default: throw Error("gather", std::string("unsupported dtype ") + dtype_name(in[0].dtype));
      }
    });
  };
}

// scatter: out = x (one strided copy, x broadcast when the node has `shape`), then a serial
// pass over index in row-major order (the order the reference and ATen's CPU kernel use, so
// duplicate indices resolve the same way).
// Indices are validated before anything is written.
template <typename T, bool kAdd>
void scatter_typed(const TensorView& idx_view, const std::vector<int64_t>& idx, const TensorView& src, int dim,
                   TensorView& out) {
  int rank = out.ndim;
  std::vector<int64_t> ostr(rank, 1), pos(rank, 0);
  for (int d = rank - 2; d >= 0; --d) ostr[d] = ostr[d + 1] * out.sizes[d + 1];
  T* dst = out.ptr<T>();
  const T* s = src.ptr<const T>();
  int64_t n = idx_view.numel();
  int64_t base = 0, soff = 0;  // out offset without dim's term; src offset of pos
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = base + idx[e] * ostr[dim];
    if constexpr (kAdd) dst[off] = static_cast<T>(dst[off] + s[soff]);
    else dst[off] = s[soff];
    for (int d = rank - 1; d >= 0; --d) {  // odometer step over index's shape
      if (++pos[d] < idx_view.sizes[d]) {
        if (d != dim) base += ostr[d];
        soff += src.strides[d];
        break;
      }
      if (d != dim) base -= (pos[d] - 1) * ostr[d];
      soff -= (pos[d] - 1) * src.strides[d];
      pos[d] = 0;
    }
  }
}

KernelFactory scatter_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = normalize_dim(ctx.node.attr("dim").i(), rank, "scatter");
    bool add = ctx.node.attr("reduce").s() == "add";
    int threads = ctx.num_threads;
    return make_kernel(add ? "cpu_scatter_add" : "cpu_scatter", [=](const TensorView* in, TensorView* out) {
      auto idx = checked_indices("scatter", in[1], out[0].sizes[dim]);
      expand_fn(in, out, threads);  // out = x; a broadcast x (`shape`) is a threaded fill
      if (idx.empty()) return;
      if (add) {
        switch (in[0].dtype) {
          case DType::f32: return scatter_typed<float, true>(in[1], idx, in[2], dim, out[0]);
          case DType::f64: return scatter_typed<double, true>(in[1], idx, in[2], dim, out[0]);
          case DType::i64: return scatter_typed<int64_t, true>(in[1], idx, in[2], dim, out[0]);
          case DType::i32: return scatter_typed<int32_t, true>(in[1], idx, in[2], dim, out[0]);
          default: throw Error("scatter", std::string("reduce=add of ") + dtype_name(in[0].dtype));
        }
      }
      switch (dtype_size(in[0].dtype)) {
        case 1: return scatter_typed<uint8_t, false>(in[1], idx, in[2], dim, out[0]);
        case 2: return scatter_typed<uint16_t, false>(in[1], idx, in[2], dim, out[0]);
        case 4: return scatter_typed<uint32_t, false>(in[1], idx, in[2], dim, out[0]);
        case 8: return scatter_typed<uint64_t, false>(in[1], idx, in[2], dim, out[0]);
        default: throw Error("scatter", std::string("unsupported dtype ") + dtype_name(in[0].dtype));
      }
    });
  };
}

// A view of the input with every flipped dim read backwards (negative stride).
KernelFactory flip_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    std::vector<bool> flipped(rank, false);
    for (int64_t d : ctx.node.attr("dims").ints())
      if (rank) flipped[normalize_dim(d, rank, "flip")] = true;
    int threads = ctx.num_threads;
    return make_kernel("cpu_flip", [flipped, threads](const TensorView* in, TensorView* out) {
      TensorView src = in[0];
      for (int k = 0; k < src.ndim; ++k)
        if (flipped[k] && src.sizes[k] > 0) src = narrow_view(src, k, src.sizes[k] - 1, src.sizes[k], -1);
      copy_strided(src, out[0], threads);
    });
  };
}

// The input packed contiguous (it already is unless it is a strided graph input), then read
// through the requested sizes and strides; the shape function bounds every position.
KernelFactory as_strided_factory() {
  return [](const KernelContext& ctx) {
    std::vector<int64_t> size = ctx.node.attr("size").ints(), stride = ctx.node.attr("stride").ints();
    int64_t offset = ctx.node.attr("offset").i();
    int threads = ctx.num_threads;
    return make_kernel("cpu_as_strided", [=](const TensorView* in, TensorView* out) {
      cpu::Packed packed(in[0], threads);
      TensorView src = out[0];
      src.data = static_cast<char*>(packed.view().data) + offset * static_cast<int64_t>(dtype_size(in[0].dtype));
      for (size_t k = 0; k < size.size(); ++k) src.strides[k] = stride[k];
      copy_strided(src, out[0], threads);
    });
  };
}

}  // namespace

void register_cpu_data_movement_kernels(KernelRegistry& r) {
  // reshape normally runs as an alias (no kernel); this copy serves strided inputs and tests.
  r.add("reshape", Device::cpu, fn_factory("cpu_reshape_copy", copy_fn));
  r.add("copy", Device::cpu, fn_factory("cpu_copy", copy_fn));
  r.add("permute", Device::cpu, permute_factory());
  r.add("slice", Device::cpu, slice_factory());
  r.add("concat", Device::cpu, concat_factory());
  r.add("expand", Device::cpu, fn_factory("cpu_expand", expand_fn));
  r.add("split", Device::cpu, split_factory());
  r.add("pad", Device::cpu, pad_factory());
  r.add("embedding", Device::cpu, fn_factory("cpu_embedding_rows", embedding_fn));
  r.add("index_select", Device::cpu, index_select_factory());
  r.add("gather", Device::cpu, gather_factory());
  r.add("scatter", Device::cpu, scatter_factory());
  r.add("flip", Device::cpu, flip_factory());
  r.add("as_strided", Device::cpu, as_strided_factory());
}

}  // namespace updraft
