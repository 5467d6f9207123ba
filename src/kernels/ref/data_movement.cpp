// Reference kernels for data movement. Every op is written as "for each output element, which
// input element (if any) does it come from?", copied by element size, so every dtype works
// and any input strides are honoured. Outputs are contiguous.
#include <algorithm>
#include <cstring>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/channel_block.h"
#include "kernels/kernel.h"
#include "kernels/ref/ref_util.h"

namespace updraft {
namespace {
using Index = std::vector<int64_t>;

// Fills out (contiguous) by asking `source(out_idx, in_idx)` to set in_idx and return true,
// or return false for "no input element" (the fill value).
template <typename F>
void map_copy(const TensorView& in, TensorView& out, const char* fill, F&& source) {
  size_t es = dtype_size(out.dtype);
  char* dst = static_cast<char*>(out.data);
  Index in_idx(in.ndim, 0);
  ref::for_each_index(out.shape(), [&](const Index& o, int64_t linear) {
    if (source(o, in_idx)) std::memcpy(dst + linear * es, ref::element_at(in, in_idx), es);
    else std::memcpy(dst + linear * es, fill, es);
  });
}

void check_index(const std::string& op, int64_t i, int64_t size) {
  if (i < 0 || i >= size)
    throw Error(op, "index " + std::to_string(i) + " is out of range for size " + std::to_string(size) +
                        "; indices must be in [0, " + std::to_string(size) + ")");
}

KernelFn same_order_copy() {
  // reshape/copy: output element i is input element i in logical order.
  return [](const TensorView* in, TensorView* out) {
    size_t es = dtype_size(in[0].dtype);
    char* dst = static_cast<char*>(out[0].data);
    const char* src = static_cast<const char*>(in[0].data);
    for (int64_t i = 0; i < in[0].numel(); ++i) std::memcpy(dst + i * es, src + ref::offset_of(in[0], i) * es, es);
  };
}

KernelFactory simple(const std::string& op, KernelFn fn) {
  return [op, fn](const KernelContext&) { return make_kernel("ref_" + op, fn); };
}

KernelFactory permute_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    Index dims;
    for (int64_t d : ctx.node.attr("dims").ints()) dims.push_back(normalize_dim(d, rank, "permute"));
    return make_kernel("ref_permute", [dims](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        for (size_t k = 0; k < dims.size(); ++k) i[dims[k]] = o[k];
        return true;
      });
    });
  };
}

KernelFactory slice_factory() {
  return [](const KernelContext& ctx) {
    const Node& n = ctx.node;
    int dim = normalize_dim(n.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "slice");
    // ctx.attr: start/end may be symbolic in the graph; the plan passes them evaluated.
    int64_t start = ctx.attr("start").i(), end = ctx.attr("end").i(), step = n.attr("step").i();
    return make_kernel("ref_slice", [=](const TensorView* in, TensorView* out) {
      SliceRange r = slice_range(in[0].sizes[dim], start, end, step);
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        i = o;
        i[dim] = r.start + o[dim] * step;
        return true;
      });
    });
  };
}

KernelFactory concat_factory() {
  return [](const KernelContext& ctx) {
    int dim = normalize_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "concat");
    int count = static_cast<int>(ctx.in_shapes.size());
    return make_kernel("ref_concat", [dim, count](const TensorView* in, TensorView* out) {
      size_t es = dtype_size(out[0].dtype);
      char* dst = static_cast<char*>(out[0].data);
      ref::for_each_index(out[0].shape(), [&](const Index& o, int64_t linear) {
        Index i = o;
        int k = 0;
        while (k < count - 1 && i[dim] >= in[k].sizes[dim]) i[dim] -= in[k++].sizes[dim];
        std::memcpy(dst + linear * es, ref::element_at(in[k], i), es);
      });
    });
  };
}

KernelFn expand_fn() {
  return [](const TensorView* in, TensorView* out) {
    int lead = out[0].ndim - in[0].ndim;
    map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
      for (int d = 0; d < in[0].ndim; ++d) i[d] = in[0].sizes[d] == 1 ? 0 : o[d + lead];
      return true;
    });
  };
}

KernelFn embedding_fn() {
  return [](const TensorView* in, TensorView* out) {
    const TensorView& w = in[0];
    int64_t n = in[1].numel(), d = w.sizes[1];
    size_t es = dtype_size(w.dtype);
    char* dst = static_cast<char*>(out[0].data);
    for (int64_t k = 0; k < n; ++k) {
      int64_t row = ref::index_at(in[1], k);
      check_index("embedding", row, w.sizes[0]);
      for (int64_t j = 0; j < d; ++j) std::memcpy(dst + (k * d + j) * es, ref::element_at(w, {row, j}), es);
    }
  };
}

KernelFactory index_select_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = normalize_dim(ctx.node.attr("dim").i(), rank, "index_select");
    return make_kernel("ref_index_select", [dim, rank](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        i = o;
        int64_t pick = ref::index_at(in[1], rank ? o[dim] : 0);
        check_index("index_select", pick, rank ? in[0].sizes[dim] : 1);
        if (rank) i[dim] = pick;
        return true;
      });
    });
  };
}

KernelFactory gather_factory() {
  return [](const KernelContext& ctx) {
    int dim = normalize_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "gather");
    return make_kernel("ref_gather", [dim](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        i = o;
        if (in[0].ndim == 0) return true;
        int64_t pick = ref::index_at(in[1], ref::offset_in_logical(in[1].shape(), o));
        check_index("gather", pick, in[0].sizes[dim]);
        i[dim] = pick;
        return true;
      });
    });
  };
}

// scatter: out = x (broadcast to out's shape), then for each position p of index in row-major
// order the out element at p with dim replaced by index[p] receives src[p] (reduce none: later
// positions win) or adds it.
KernelFactory scatter_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = normalize_dim(ctx.node.attr("dim").i(), rank, "scatter");
    bool add = ctx.node.attr("reduce").s() == "add";
    return make_kernel("ref_scatter", [dim, add](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {  // x broadcast to out
        i = o;
        for (int d = 0; d < in[0].ndim; ++d)
          if (in[0].sizes[d] == 1) i[d] = 0;
        return true;
      });
      const TensorView& idx = in[1];
      const TensorView& src = in[2];
      Index strides = ref::strides_of(out[0].shape());
      size_t es = dtype_size(out[0].dtype);
      char* dst = static_cast<char*>(out[0].data);
      ref::for_each_index(idx.shape(), [&](const Index& p, int64_t linear) {
        int64_t t = ref::index_at(idx, linear);
        check_index("scatter", t, out[0].sizes[dim]);
        int64_t off = 0;
        for (int d = 0; d < out[0].ndim; ++d) off += (d == dim ? t : p[d]) * strides[d];
        const char* s = ref::element_at(src, p);
        if (!add) {
          std::memcpy(dst + off * es, s, es);
          return;
        }
        ref::dispatch_numeric(out[0].dtype, "scatter", [&](auto zero) {
          using T = decltype(zero);
          T a, b;
          std::memcpy(&a, dst + off * es, sizeof(T));
          std::memcpy(&b, s, sizeof(T));
          a = static_cast<T>(a + b);
          std::memcpy(dst + off * es, &a, sizeof(T));
        });
      });
    });
  };
}

KernelFactory pad_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    auto amounts = pad_amounts(ctx.node.attr("pads").ints(), rank);
    auto fill = ref::scalar_bytes(ctx.in_dtype(0), ctx.node.attr("value").f(), "pad");
    return make_kernel("ref_pad", [amounts, fill](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], fill.data(), [&](const Index& o, Index& i) {
        for (int d = 0; d < in[0].ndim; ++d) {
          i[d] = o[d] - amounts[d].before;
          if (i[d] < 0 || i[d] >= in[0].sizes[d]) return false;
        }
        return true;
      });
    });
  };
}

KernelFactory split_factory() {
  return [](const KernelContext& ctx) {
    int dim = normalize_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "split");
    Index sizes = ctx.node.attr("sizes").ints();
    return make_kernel("ref_split", [dim, sizes](const TensorView* in, TensorView* out) {
      int64_t total = 0;
      for (int64_t s : sizes) total += s;
      if (total != in[0].sizes[dim])
        throw Error("split", "sizes sum to " + std::to_string(total) + " but dim " + std::to_string(dim) +
                                 " has size " + std::to_string(in[0].sizes[dim]));
      int64_t offset = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        map_copy(in[0], out[k], nullptr, [&](const Index& o, Index& i) {
          i = o;
          i[dim] += offset;
          return true;
        });
        offset += sizes[k];
      }
    });
  };
}

KernelFactory flip_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    std::vector<bool> flipped(rank, false);
    for (int64_t d : ctx.node.attr("dims").ints())
      if (rank) flipped[normalize_dim(d, rank, "flip")] = true;
    return make_kernel("ref_flip", [flipped](const TensorView* in, TensorView* out) {
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        for (size_t k = 0; k < o.size(); ++k) i[k] = flipped[k] ? in[0].sizes[k] - 1 - o[k] : o[k];
        return true;
      });
    });
  };
}

KernelFactory as_strided_factory() {
  return [](const KernelContext& ctx) {
    std::vector<int64_t> stride = ctx.node.attr("stride").ints();
    int64_t offset = ctx.node.attr("offset").i();
    return make_kernel("ref_as_strided", [stride, offset](const TensorView* in, TensorView* out) {
      Index shape = in[0].shape();
      map_copy(in[0], out[0], nullptr, [&](const Index& o, Index& i) {
        int64_t flat = offset;  // position in x's row-major order ...
        for (size_t k = 0; k < o.size(); ++k) flat += o[k] * stride[k];
        for (int k = in[0].ndim - 1; k >= 0; --k) {  // ... as a multi-index of x
          i[k] = flat % shape[k];
          flat /= shape[k];
        }
        check_index("as_strided", flat, 1);  // the shape function bounds it; recheck here
        return true;
      });
    });
  };
}

}  // namespace

void register_ref_data_movement_kernels(KernelRegistry& r) {
  r.add("reshape", Device::ref, simple("reshape", same_order_copy()));
  r.add("copy", Device::ref, simple("copy", same_order_copy()));
  r.add("permute", Device::ref, permute_factory());
  r.add("slice", Device::ref, slice_factory());
  r.add("concat", Device::ref, concat_factory());
  r.add("expand", Device::ref, simple("expand", expand_fn()));
  r.add("embedding", Device::ref, simple("embedding", embedding_fn()));
  r.add("index_select", Device::ref, index_select_factory());
  r.add("gather", Device::ref, gather_factory());
  r.add("scatter", Device::ref, scatter_factory());
  r.add("pad", Device::ref, pad_factory());
  r.add("split", Device::ref, split_factory());
  r.add("flip", Device::ref, flip_factory());
  r.add("as_strided", Device::ref, as_strided_factory());
  r.add("channel_block", Device::ref, [](const KernelContext& ctx) {
    const int64_t from = ctx.attr("from_block").i(), to = ctx.attr("to_block").i();
    return make_kernel("ref_channel_block", [from, to](const TensorView* in, TensorView* out) {
      // A plain input may be strided (a graph input): read through its strides.
      const TensorView& x = in[0];
      channel_block_copy(x.data, out[0].data, dtype_size(x.dtype), x.sizes, from, to, x.strides);
    });
  });
}

}  // namespace updraft
