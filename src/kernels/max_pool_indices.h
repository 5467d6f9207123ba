// Max pooling with indices and its gradient, as ATen's CPU kernels define them for NCHW
// (the ref and cpu kernels share these loops; the cpu kernels split the planes between
// threads, and the f32 one takes interior columns eight at a time with the same results). A window starts at o * stride - padding, steps by the dilation, and skips the rows
// and columns outside the image; its maximum is the first strictly larger value in row-major
// order, or the last NaN (ATen's `val > max || isnan(val)`), and its index is the position
// h * W + w within the plane (before any value is read: the window's first in-image position).
// The gradient adds dy at each output's index into a zeroed plane, outputs in order, so
// overlapping windows (stride < kernel) sum in the order eager sums them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/tensor.h"
#include "ir/ops/params.h"

namespace updraft {

// The in-image rows of output row oh's windows: [h0, h1) stepping by the dilation.
inline void pool_window_rows(const PoolWindow& win, int64_t oh, int64_t H, int64_t& h0, int64_t& h1) {
  h0 = oh * win.s[0] - win.p[0];
  h1 = std::min(h0 + (win.k[0] - 1) * win.d[0] + 1, H);
  while (h0 < 0) h0 += win.d[0];
}

// Output columns [ow_begin, ow_end) of one output row, whose window rows are [h0, h1).
template <typename T>
void max_pool_indices_columns(const T* x, T* y, int64_t* idx, int64_t W, int64_t h0, int64_t h1, int64_t ow_begin,
                              int64_t ow_end, const PoolWindow& win) {
  for (int64_t ow = ow_begin; ow < ow_end; ++ow) {
    int64_t w0 = ow * win.s[1] - win.p[1];
    const int64_t w1 = std::min(w0 + (win.k[1] - 1) * win.d[1] + 1, W);
    while (w0 < 0) w0 += win.d[1];
    int64_t best = h0 * W + w0;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t h = h0; h < h1; h += win.d[0])
      for (int64_t w = w0; w < w1; w += win.d[1]) {
        const T v = x[h * W + w];
        if (v > m || std::isnan(v)) {
          m = v;
          best = h * W + w;
        }
      }
    y[ow] = m;
    idx[ow] = best;
  }
}

// One plane: x [H, W] -> y, idx [OH, OW].
template <typename T>
void max_pool_indices_plane(const T* x, T* y, int64_t* idx, int64_t H, int64_t W, int64_t OH, int64_t OW,
                            const PoolWindow& win) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    int64_t h0, h1;
    pool_window_rows(win, oh, H, h0, h1);
    max_pool_indices_columns(x, y + oh * OW, idx + oh * OW, W, h0, h1, 0, OW, win);
  }
}

// One plane of the gradient: dx [H * W] = 0, then dx[idx[i]] += dy[i] for i < OH * OW.
template <typename T>
void max_pool_backward_plane(const T* dy, const int64_t* idx, T* dx, int64_t HW, int64_t OHW) {
  std::memset(dx, 0, sizeof(T) * HW);
  for (int64_t i = 0; i < OHW; ++i)
    if (idx[i] >= 0 && idx[i] < HW) dx[idx[i]] += dy[i];  // indices from elsewhere may be -1 (none)
}

// One plane's loop: max_pool_indices_plane<T>, or a vector form of it with the same results.
template <typename T>
using MaxPoolPlane = void (*)(const T*, T*, int64_t*, int64_t, int64_t, int64_t, int64_t, const PoolWindow&);

// The ops on contiguous NCHW views (the kernels pack strided inputs first), planes split over
// `threads` (1: a plain loop).
template <typename T>
void max_pool_indices(const TensorView& x, TensorView& y, TensorView& idx, const PoolWindow& win, int threads,
                      MaxPoolPlane<T> plane = &max_pool_indices_plane<T>) {
  const int64_t planes = x.sizes[0] * x.sizes[1], H = x.sizes[2], W = x.sizes[3], OH = y.sizes[2], OW = y.sizes[3];
  const T* xp = x.ptr<const T>();
  T* yp = y.ptr<T>();
  int64_t* ip = idx.ptr<int64_t>();
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < planes; ++p)
    plane(xp + p * H * W, yp + p * OH * OW, ip + p * OH * OW, H, W, OH, OW, win);
}

template <typename T>
void max_pool_backward(const TensorView& dy, const TensorView& idx, TensorView& dx, int threads) {
  const int64_t planes = dx.sizes[0] * dx.sizes[1], HW = dx.sizes[2] * dx.sizes[3], OHW = dy.sizes[2] * dy.sizes[3];
  const T* dyp = dy.ptr<const T>();
  const int64_t* ip = idx.ptr<const int64_t>();
  T* dxp = dx.ptr<T>();
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < planes; ++p) max_pool_backward_plane(dyp + p * OHW, ip + p * OHW, dxp + p * HW, HW, OHW);
}

}  // namespace updraft
