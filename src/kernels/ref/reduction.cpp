// Reference kernels for reductions and norms: the oracle the fast kernels are tested against.
// Floats accumulate in double, integers in int64 (exact); inputs may have any strides.
#include <cmath>
#include <limits>
#include <type_traits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "ir/ops/softmax.h"
#include "kernels/kernel.h"
#include "kernels/ref/ref_util.h"

namespace updraft {
namespace {
using ref::to_vector;

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// Kept and reduced dims of a contiguous (gathered) input, with their element strides.
struct ReducePlan {
  std::vector<int64_t> kept_sizes, kept_strides, red_sizes, red_strides;
  int64_t out_numel = 1, red_numel = 1;
};

ReducePlan make_plan(const std::vector<int64_t>& shape, const std::vector<bool>& mask) {
  ReducePlan p;
  auto st = ref::strides_of(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (mask[d]) {
      p.red_sizes.push_back(shape[d]);
      p.red_strides.push_back(st[d]);
      p.red_numel *= shape[d];
    } else {
      p.kept_sizes.push_back(shape[d]);
      p.kept_strides.push_back(st[d]);
      p.out_numel *= shape[d];
    }
  }
  return p;
}

// Offset of the `linear`-th combination of (sizes, strides), row-major.
int64_t offset_in(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t linear) {
  int64_t off = 0;
  for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
    off += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return off;
}

// The values output element `o` reduces, in row-major order of the reduced dims.
template <typename T>
std::vector<T> values_for(const std::vector<T>& x, const ReducePlan& p, int64_t o) {
  int64_t base = offset_in(p.kept_sizes, p.kept_strides, o);
  std::vector<T> v(p.red_numel);
  for (int64_t r = 0; r < p.red_numel; ++r) v[r] = x[base + offset_in(p.red_sizes, p.red_strides, r)];
  return v;
}

enum class RedOp { sum, mean, prod, amax, amin, var };

template <typename T>
T reduce_values(RedOp op, const std::vector<T>& v, double correction) {
  switch (op) {
    case RedOp::sum: {
      Acc<T> s = 0;
      for (T x : v) s += x;
      return static_cast<T>(s);
    }
    case RedOp::prod: {
      Acc<T> s = 1;
      for (T x : v) s *= x;
      return static_cast<T>(s);
    }
    case RedOp::mean: {
      double s = 0;
      for (T x : v) s += x;
      return static_cast<T>(s / static_cast<double>(v.size()));  // 0/0 = NaN, as torch
    }
    case RedOp::amax:
    case RedOp::amin: {
      T best = v.at(0);
      for (T x : v) {
        if (is_nan(x)) return x;
        if (op == RedOp::amax ? x > best : x < best) best = x;
      }
      return best;
    }
    case RedOp::var: {
      double mean = 0;
      for (T x : v) mean += x;
      mean /= static_cast<double>(v.size());
      double ss = 0;
      for (T x : v) ss += (x - mean) * (x - mean);
      double denom = std::max(static_cast<double>(v.size()) - correction, 0.0);
      return static_cast<T>(ss / denom);
    }
  }
  return T{};
}

void check_nonempty(const std::string& op, int64_t red_numel, int64_t out_numel) {
  if (red_numel == 0 && out_numel > 0) throw Error(op, "cannot reduce over an empty dim (no identity)");
}

KernelFactory reduce_factory(RedOp op, const std::string& name) {
  return [op, name](const KernelContext& ctx) {
    auto mask = reduce_mask(ctx.node.attr("dims").ints(), static_cast<int>(ctx.in_shapes[0].size()), name);
    double correction = op == RedOp::var ? ctx.node.attr("correction").f() : 0.0;
    return make_kernel("ref_" + name, [=](const TensorView* in, TensorView* out) {
      ReducePlan p = make_plan(in[0].shape(), mask);
      if (op == RedOp::amax || op == RedOp::amin) check_nonempty(name, p.red_numel, p.out_numel);
      ref::dispatch_numeric(in[0].dtype, name, [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        T* y = out[0].ptr<T>();
        for (int64_t o = 0; o < p.out_numel; ++o) y[o] = reduce_values<T>(op, values_for(x, p, o), correction);
      });
    });
  };
}

// argmax/argmin: first index of the extreme value; a NaN is more extreme than any number.
KernelFactory arg_factory(bool is_max, const std::string& name) {
  return [is_max, name](const KernelContext& ctx) {
    auto mask = reduce_mask({ctx.node.attr("dim").i()}, static_cast<int>(ctx.in_shapes[0].size()), name);
    return make_kernel("ref_" + name, [=](const TensorView* in, TensorView* out) {
      ReducePlan p = make_plan(in[0].shape(), mask);
      check_nonempty(name, p.red_numel, p.out_numel);
      ref::dispatch_numeric(in[0].dtype, name, [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        int64_t* y = out[0].ptr<int64_t>();
        for (int64_t o = 0; o < p.out_numel; ++o) {
          auto v = values_for(x, p, o);
          int64_t best = 0;
          for (int64_t r = 1; r < static_cast<int64_t>(v.size()) && !is_nan(v[best]); ++r)
            if (is_nan(v[r]) || (is_max ? v[r] > v[best] : v[r] < v[best])) best = r;
          y[o] = best;
        }
      });
    });
  };
}

// A dim split as [outer, n, inner] of the contiguous logical layout.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const std::vector<int64_t>& shape, int dim) {
    for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
      if (d < dim) outer *= shape[d];
      else if (d == dim) n = shape[d];
      else inner *= shape[d];
    }
    if (shape.empty()) n = 1;  // a 0-d tensor is one line of one element
  }
  int64_t at(int64_t o, int64_t j, int64_t i) const { return (o * n + j) * inner + i; }
};

KernelFactory cumsum_factory() {
  return [](const KernelContext& ctx) {
    int dim = wrap_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "cumsum");
    return make_kernel("ref_cumsum", [=](const TensorView* in, TensorView* out) {
      Lines L(in[0].shape(), dim);
      ref::dispatch_numeric(in[0].dtype, "cumsum", [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        T* y = out[0].ptr<T>();
        for (int64_t o = 0; o < L.outer; ++o)
          for (int64_t i = 0; i < L.inner; ++i) {
            Acc<T> s = 0;
            for (int64_t j = 0; j < L.n; ++j) y[L.at(o, j, i)] = static_cast<T>(s += x[L.at(o, j, i)]);
          }
      });
    });
  };
}

// ---- norms ----

template <typename F>
void dispatch_float(DType t, const std::string& op, F&& f) {
  if (t == DType::f32) f(float{});
  else if (t == DType::f64) f(double{});
  else throw Error(op, std::string("the reference kernel handles f32 and f64, not ") + dtype_name(t));
}

KernelFactory softmax_factory(bool log, const std::string& name) {
  return [log, name](const KernelContext& ctx) {
    int dim = wrap_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), name);
    const bool zero_masked = zero_masked_rows(ctx.node);
    return make_kernel("ref_" + name, [=](const TensorView* in, TensorView* out) {
      Lines L(in[0].shape(), dim);
      dispatch_float(in[0].dtype, name, [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        T* y = out[0].ptr<T>();
        for (int64_t o = 0; o < L.outer; ++o)
          for (int64_t i = 0; i < L.inner; ++i) {
            double m = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < L.n; ++j) m = std::max<double>(m, x[L.at(o, j, i)]);
            // A line of all -inf gives NaN (-inf - -inf), as torch does; 0s with zero_masked_rows
            // (torch's _safe_softmax).
            if (zero_masked) {
              bool masked = true;  // every element -inf (a NaN is not: the line stays NaN)
              for (int64_t j = 0; j < L.n && masked; ++j)
                masked = x[L.at(o, j, i)] == -std::numeric_limits<T>::infinity();
              if (masked) {
                for (int64_t j = 0; j < L.n; ++j) y[L.at(o, j, i)] = T(0);
                continue;
              }
            }
            double s = 0;
            for (int64_t j = 0; j < L.n; ++j) s += std::exp(x[L.at(o, j, i)] - m);
            for (int64_t j = 0; j < L.n; ++j) {
              double z = x[L.at(o, j, i)] - m;
              y[L.at(o, j, i)] = static_cast<T>(log ? z - std::log(s) : std::exp(z) / s);
            }
          }
      });
    });
  };
}

// layer_norm (center=true) and rms_norm (center=false) over rows of the trailing dims.
KernelFactory row_norm_factory(bool center, const std::string& name) {
  return [center, name](const KernelContext& ctx) {
    const Node& n = ctx.node;
    int nd = static_cast<int>(n.attr("normalized_ndim").i());
    double eps = n.attr("eps").f();
    bool hw = n.attr("has_weight").b(), hb = center && n.attr("has_bias").b();
    return make_kernel("ref_" + name, [=](const TensorView* in, TensorView* out) {
      auto shape = in[0].shape();
      int64_t cols = 1;
      for (int d = static_cast<int>(shape.size()) - nd; d < static_cast<int>(shape.size()); ++d) cols *= shape[d];
      int64_t rows = cols ? in[0].numel() / cols : 0;
      dispatch_float(in[0].dtype, name, [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        std::vector<T> w = hw ? to_vector<T>(in[1]) : std::vector<T>();
        std::vector<T> b = hb ? to_vector<T>(in[1 + hw]) : std::vector<T>();
        T* y = out[0].ptr<T>();
        for (int64_t r = 0; r < rows; ++r) {
          const T* xr = &x[r * cols];
          double mean = 0;
          if (center) {
            for (int64_t j = 0; j < cols; ++j) mean += xr[j];
            mean /= static_cast<double>(cols);
          }
          double ss = 0;
          for (int64_t j = 0; j < cols; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
          double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
          for (int64_t j = 0; j < cols; ++j) {
            double v = (xr[j] - mean) * inv;
            if (hw) v *= w[j];
            if (hb) v += b[j];
            y[r * cols + j] = static_cast<T>(v);
          }
        }
      });
    });
  };
}

KernelFactory batch_norm_factory() {
  return [](const KernelContext& ctx) {
    const Node& n = ctx.node;
    double eps = n.attr("eps").f();
    bool hw = n.attr("has_weight").b(), hb = n.attr("has_bias").b();
    return make_kernel("ref_batch_norm", [=](const TensorView* in, TensorView* out) {
      Lines L(in[0].shape(), 1);  // [N, C, spatial]
      dispatch_float(in[0].dtype, "batch_norm", [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        auto mean = to_vector<T>(in[1]), var = to_vector<T>(in[2]);
        std::vector<T> w = hw ? to_vector<T>(in[3]) : std::vector<T>();
        std::vector<T> b = hb ? to_vector<T>(in[3 + hw]) : std::vector<T>();
        T* y = out[0].ptr<T>();
        for (int64_t o = 0; o < L.outer; ++o)
          for (int64_t c = 0; c < L.n; ++c) {
            double inv = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
            for (int64_t i = 0; i < L.inner; ++i) {
              double v = (x[L.at(o, c, i)] - static_cast<double>(mean[c])) * inv;
              if (hw) v *= w[c];
              if (hb) v += b[c];
              y[L.at(o, c, i)] = static_cast<T>(v);
            }
          }
      });
    });
  };
}

// Train-mode batch norm, literally: the batch mean and biased variance per channel in double
// (two passes), y = (x - mean) / sqrt(var + eps) * w + b.
KernelFactory batch_norm_train_factory() {
  return [](const KernelContext& ctx) {
    const Node& n = ctx.node;
    double eps = n.attr("eps").f();
    bool hw = n.attr("has_weight").b(), hb = n.attr("has_bias").b();
    return make_kernel("ref_batch_norm_train", [=](const TensorView* in, TensorView* out) {
      Lines L(in[0].shape(), 1);
      dispatch_float(in[0].dtype, "batch_norm_train", [&](auto tag) {
        using T = decltype(tag);
        auto x = to_vector<T>(in[0]);
        std::vector<T> w = hw ? to_vector<T>(in[1]) : std::vector<T>();
        std::vector<T> b = hb ? to_vector<T>(in[1 + hw]) : std::vector<T>();
        const double M = static_cast<double>(L.outer * L.inner);
        for (int64_t c = 0; c < L.n; ++c) {
          double mean = 0, var = 0;
          for (int64_t o = 0; o < L.outer; ++o)
            for (int64_t i = 0; i < L.inner; ++i) mean += x[L.at(o, c, i)];
          mean /= M;
          for (int64_t o = 0; o < L.outer; ++o)
            for (int64_t i = 0; i < L.inner; ++i) var += (x[L.at(o, c, i)] - mean) * (x[L.at(o, c, i)] - mean);
          var /= M;
          out[1].ptr<T>()[c] = static_cast<T>(mean);
          out[2].ptr<T>()[c] = static_cast<T>(var);
          const double inv = 1.0 / std::sqrt(var + eps);
          for (int64_t o = 0; o < L.outer; ++o)
            for (int64_t i = 0; i < L.inner; ++i) {
              double v = (x[L.at(o, c, i)] - mean) * inv;
              if (hw) v *= w[c];
              if (hb) v += b[c];
              out[0].ptr<T>()[L.at(o, c, i)] = static_cast<T>(v);
            }
        }
      });
    });
  };
}

// Its gradient from the saved mean and invstd, in double: with xhat = (x - mean) * invstd,
// dx = (dy - mean(dy) - xhat * mean(dy * xhat)) * invstd * w, dw = sum(dy * xhat), db = sum(dy).
KernelFactory batch_norm_backward_factory() {
  return [](const KernelContext& ctx) {
    bool hw = ctx.node.attr("has_weight").b();
    return make_kernel("ref_batch_norm_backward", [=](const TensorView* in, TensorView* out) {
      Lines L(in[1].shape(), 1);
      dispatch_float(in[1].dtype, "batch_norm_backward", [&](auto tag) {
        using T = decltype(tag);
        auto dy = to_vector<T>(in[0]), x = to_vector<T>(in[1]);
        auto mean = to_vector<T>(in[2]), invstd = to_vector<T>(in[3]);
        std::vector<T> w = hw ? to_vector<T>(in[4]) : std::vector<T>();
        const double M = static_cast<double>(L.outer * L.inner);
        for (int64_t c = 0; c < L.n; ++c) {
          double sum_dy = 0, dot = 0;
          const double m = mean[c], is = invstd[c];
          for (int64_t o = 0; o < L.outer; ++o)
            for (int64_t i = 0; i < L.inner; ++i) {
              sum_dy += dy[L.at(o, c, i)];
              dot += dy[L.at(o, c, i)] * (x[L.at(o, c, i)] - m) * is;
            }
          out[1].ptr<T>()[c] = static_cast<T>(dot);
          out[2].ptr<T>()[c] = static_cast<T>(sum_dy);
          const double scale = is * (hw ? static_cast<double>(w[c]) : 1.0);
          for (int64_t o = 0; o < L.outer; ++o)
            for (int64_t i = 0; i < L.inner; ++i) {
              const double xhat = (x[L.at(o, c, i)] - m) * is;
              out[0].ptr<T>()[L.at(o, c, i)] = static_cast<T>((dy[L.at(o, c, i)] - sum_dy / M - xhat * dot / M) * scale);
            }
        }
      });
    });
  };
}

}  // namespace

void register_ref_reduction_kernels(KernelRegistry& r) {
  r.add("batch_norm_train", Device::ref, batch_norm_train_factory());
  r.add("batch_norm_backward", Device::ref, batch_norm_backward_factory());
  r.add("sum", Device::ref, reduce_factory(RedOp::sum, "sum"));
  r.add("mean", Device::ref, reduce_factory(RedOp::mean, "mean"));
  r.add("prod", Device::ref, reduce_factory(RedOp::prod, "prod"));
  r.add("amax", Device::ref, reduce_factory(RedOp::amax, "amax"));
  r.add("amin", Device::ref, reduce_factory(RedOp::amin, "amin"));
  r.add("var", Device::ref, reduce_factory(RedOp::var, "var"));
  r.add("argmax", Device::ref, arg_factory(true, "argmax"));
  r.add("argmin", Device::ref, arg_factory(false, "argmin"));
  r.add("cumsum", Device::ref, cumsum_factory());
  r.add("softmax", Device::ref, softmax_factory(false, "softmax"));
  r.add("log_softmax", Device::ref, softmax_factory(true, "log_softmax"));
  r.add("layer_norm", Device::ref, row_norm_factory(true, "layer_norm"));
  r.add("rms_norm", Device::ref, row_norm_factory(false, "rms_norm"));
  r.add("batch_norm", Device::ref, batch_norm_factory());
}

}  // namespace updraft
