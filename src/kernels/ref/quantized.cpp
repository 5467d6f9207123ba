// Reference kernels for the low-precision-weight ops (src/ir/ops/quantized.cpp): they define
// what quantize_rows, quantize_int4 and to_bf16 compute (constant folding runs them: the pass quantize_weights
// folds a weight through them once per compile or refit) and are the oracle the fast linear_wq
// kernels are tested against (tests/cpp/test_linear_wq.cpp). Plain loops, any input strides,
// double accumulation in linear_wq.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"
#include "kernels/quantize.h"

namespace updraft {

namespace {

// Element offset of row `r` (a row index over every dim but the last) of view v.
int64_t row_offset(const TensorView& v, int64_t r) {
  int64_t off = 0;
  for (int d = v.ndim - 2; d >= 0; --d) {
    int64_t size = v.sizes[d];
    off += (r % size) * v.strides[d];
    r /= size;
  }
  return off;
}

int64_t num_rows(const TensorView& v) {
  int64_t n = 1;
  for (int d = 0; d + 1 < v.ndim; ++d) n *= v.sizes[d];
  return n;
}

void ref_quantize_rows(const TensorView* in, TensorView* out) {
  const TensorView& x = in[0];
  const int64_t K = x.sizes[x.ndim - 1], R = num_rows(x), sk = x.strides[x.ndim - 1];
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = 0; r < R; ++r) {
    const float* src = x.ptr<const float>() + row_offset(x, r);
    for (int64_t k = 0; k < K; ++k) row[k] = src[k * sk];
    out[1].ptr<float>()[r] = quantize_row_int8(row.data(), K, out[0].ptr<int8_t>() + r * K);
  }
}

void ref_quantize_int4(const TensorView* in, TensorView* out) {
  const TensorView& x = in[0];
  const int64_t K = x.sizes[x.ndim - 1], R = num_rows(x), sk = x.strides[x.ndim - 1];
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = 0; r < R; ++r) {
    const float* src = x.ptr<const float>() + row_offset(x, r);
    for (int64_t k = 0; k < K; ++k) row[k] = src[k * sk];
    quantize_row_int4(row.data(), K, out[0].ptr<uint8_t>() + r * (K / 2), out[1].ptr<uint16_t>() + r * (K / kInt4Group));
  }
}

void ref_to_bf16(const TensorView* in, TensorView* out) {
  const TensorView& x = in[0];
  const int64_t K = x.ndim ? x.sizes[x.ndim - 1] : 1, R = x.ndim ? num_rows(x) : 1;
  const int64_t sk = x.ndim ? x.strides[x.ndim - 1] : 1;
  uint16_t* dst = out[0].ptr<uint16_t>();
  for (int64_t r = 0; r < R; ++r) {
    const float* src = x.ptr<const float>() + (x.ndim ? row_offset(x, r) : 0);
    for (int64_t k = 0; k < K; ++k) dst[r * K + k] = f32_to_bf16(src[k * sk]);
  }
}

// w[n, k] as stored: i8 and int4 without their scale, bf16 widened. An int4 w is read as the
// contiguous rows quantize_int4 writes (K / 2 bytes each).
double weight_at(const TensorView& w, int64_t n, int64_t k) {
  if (w.dtype == DType::u8) return int4_at(w.ptr<const uint8_t>() + n * w.sizes[1], k);
  int64_t off = n * w.strides[0] + k * w.strides[1];
  if (w.dtype == DType::i8) return w.ptr<const int8_t>()[off];
  return bf16_to_f32(w.ptr<const uint16_t>()[off]);
}

// The scale of group g of row n of an int4 w (bf16, as quantize_int4 writes them).
float int4_scale(const TensorView& s, int64_t n, int64_t g) {
  return bf16_to_f32(s.ptr<const uint16_t>()[n * s.strides[0] + g * s.strides[1]]);
}

// y[r, n] = act(sum_k x[r, k] * w[n, k] * scale[n] + bias[n] + residual[r, n]), in double.
// quantize_x: row r of x quantised (quantize_act_row_int8: qx, sx), the products qx . w summed
// exactly, and the sum taken to f32 as (f32(sum) * sx) * scale[n] (the fast kernels' order), the
// epilogue in double from there.
void ref_linear_wq(const TensorView* in, TensorView* out, const Epilogue& ep, bool scaled, bool quantize_x) {
  const TensorView &x = in[0], &w = in[1];
  const TensorView& y = out[0];
  const bool int4 = w.dtype == DType::u8;
  UPDRAFT_CHECK(!int4 || w.is_contiguous(), "linear_wq", "an int4 w must be contiguous (quantize_int4's rows)");
  const int64_t K = int4 ? 2 * w.sizes[1] : w.sizes[1], N = w.sizes[0], R = num_rows(x), sk = x.strides[x.ndim - 1];
  std::vector<float> row(quantize_x ? static_cast<size_t>(K) : 0);
  std::vector<int8_t> qx(row.size());
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x.ptr<const float>() + row_offset(x, r);
    float sx = 0;
    if (quantize_x) {
      for (int64_t k = 0; k < K; ++k) row[k] = xr[k * sk];
      sx = quantize_act_row_int8(row.data(), K, qx.data());
    }
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      if (quantize_x && int4) {  // per group: the exact sum times the group's scale, then sx
        const TensorView& s = in[2];
        for (int64_t g = 0; g < K / kInt4Group; ++g) {
          int64_t sum = 0;
          for (int64_t k = g * kInt4Group; k < (g + 1) * kInt4Group; ++k)
            sum += qx[k] * static_cast<int64_t>(weight_at(w, n, k));
          acc += static_cast<double>(sum) * int4_scale(s, n, g);
        }
        acc *= sx;
      } else if (quantize_x) {
        int64_t sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += qx[k] * static_cast<int64_t>(weight_at(w, n, k));
        acc = (static_cast<float>(sum) * sx) * in[2].ptr<const float>()[n * in[2].strides[0]];
      } else if (int4) {  // each group's sum times the group's scale
        const TensorView& s = in[2];
        for (int64_t g = 0; g < K / kInt4Group; ++g) {
          double part = 0;
          for (int64_t k = g * kInt4Group; k < (g + 1) * kInt4Group; ++k)
            part += static_cast<double>(xr[k * sk]) * weight_at(w, n, k);
          acc += part * int4_scale(s, n, g);
        }
      } else {
        for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xr[k * sk]) * weight_at(w, n, k);
        if (scaled) acc *= in[2].ptr<const float>()[n * in[2].strides[0]];
      }
      if (ep.has_bias) acc += in[ep.bias_input].ptr<const float>()[n * in[ep.bias_input].strides[0]];
      if (ep.has_residual) {
        const TensorView& res = in[ep.residual_input];
        acc += res.ptr<const float>()[row_offset(res, r) + n * res.strides[res.ndim - 1]];
      }
      if (ep.act) acc = ew_ref<double>(*ep.act, acc, ep.alpha, ep.beta);
      y.ptr<float>()[r * N + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace

void register_ref_quantized_kernels(KernelRegistry& r) {
  r.add("quantize_rows", Device::ref,
        [](const KernelContext&) { return make_kernel("ref_quantize_rows", ref_quantize_rows); });
  r.add("quantize_int4", Device::ref,
        [](const KernelContext&) { return make_kernel("ref_quantize_int4", ref_quantize_int4); });
  r.add("to_bf16", Device::ref, [](const KernelContext&) { return make_kernel("ref_to_bf16", ref_to_bf16); });
  r.add("linear_wq", Device::ref, [](const KernelContext& ctx) {
    const bool scaled = ctx.node.attr("has_weight_scale").b(), qx = ctx.node.attr("quantize_x").b();
    Epilogue ep = Epilogue::of(ctx.node, scaled ? 3 : 2);
    return make_kernel("ref_linear_wq", [ep, scaled, qx](const TensorView* in, TensorView* out) {
      ref_linear_wq(in, out, ep, scaled, qx);
    });
  });
}

}  // namespace updraft
