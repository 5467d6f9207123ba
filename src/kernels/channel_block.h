// Channel-blocked activation layouts (nChw8c / nChw16c, and channels-last) used between
// convolutions.
//
// A tensor with logical shape [N, C, H, W] in block layout B (C % B == 0) stores element
// (n, c, h, w) at ((n * C/B + c/B) * H * W + h * W + w) * B + c % B: the channels are cut into
// groups of B and each pixel's B channels of a group lie next to each other, which is what
// oneDNN's direct convolutions read and write (docs/ops.md, "channel_block"). B = 0 means
// plain NCHW. The element count is unchanged (no padding), so a blocked tensor needs exactly
// the buffer of the plain one.
// B = C (one block of all the channels) is channels-last, NHWC: each pixel's C channels lie
// next to each other. It is a layout of its own in oneDNN (nhwc), where its brgemm-based
// convolutions run; the block_conv_layout pass asks for it with kChannelsLast, and every value
// it keeps channels-last gets block = its channel count.
//
//   std::vector<float> blocked(n * c * h * w);
//   channel_block_copy(plain.data(), blocked.data(), sizeof(float), {n, c, h, w}, 0, 16);
#pragma once
#include <cstdint>
#include <cstring>

namespace updraft {

// CompileOptions::channel_block's code for channels-last: every conv activation in block C.
constexpr int kChannelsLast = -2;

// Offset in elements of (n, c, h, w) in an [N, C, H, W] tensor with block `b` (0: plain).
inline int64_t channel_block_offset(int64_t n, int64_t c, int64_t h, int64_t w, const int64_t* shape, int64_t b) {
  const int64_t C = shape[1], H = shape[2], W = shape[3];
  if (b == 0) return ((n * C + c) * H + h) * W + w;
  return ((n * (C / b) + c / b) * H * W + h * W + w) * b + c % b;
}

// Copies an [N, C, H, W] tensor of `elem` bytes per element from block layout `from` to `to`
// (either may be 0, plain). A plain source may be strided: `src_strides` (elements, one per
// dim) or null for contiguous. src and dst must not overlap.
inline void channel_block_copy(const void* src, void* dst, size_t elem, const int64_t* shape, int64_t from,
                               int64_t to, const int64_t* src_strides = nullptr) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t n = 0; n < shape[0]; ++n)
    for (int64_t c = 0; c < shape[1]; ++c)
      for (int64_t h = 0; h < shape[2]; ++h)
        for (int64_t w = 0; w < shape[3]; ++w) {
          const int64_t at = from == 0 && src_strides
                                 ? n * src_strides[0] + c * src_strides[1] + h * src_strides[2] + w * src_strides[3]
                                 : channel_block_offset(n, c, h, w, shape, from);
          std::memcpy(d + channel_block_offset(n, c, h, w, shape, to) * elem, s + at * elem, elem);
        }
}

}  // namespace updraft
