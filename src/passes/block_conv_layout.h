// Pass: block_conv_layout. Keeps convolution activations in a channel-blocked layout
// (nChw8c / nChw16c, or channels-last NHWC; kernels/channel_block.h) through chains of conv2d,
// so oneDNN runs its direct (blocked) or brgemm (NHWC) convolutions without a reorder at every
// op boundary.
//
// Channels-last (block = kChannelsLast, the default with AVX-512): every f32 conv2d with static
// channel counts (but a 1x1 conv whose edges would cost copies, below) reads and writes NHWC,
// which is block C of its own channel count: a value of
// C channels is stored in block C, and everything below (copies at the edges, elementwise ops
// on 5-d views [N, 1, H, W, C], spatial means) works on it unchanged. oneDNN's NHWC kernels
// take any channel count and any groups, and an image too once it is copied to NHWC (a plain
// src with an NHWC dst is served only by its reference loops).
//
// What it does, for block size B > 0:
//  - a conv2d whose input and output have static channel counts divisible by B (or an input
//    of at most 4 channels, e.g. the first conv's image, which oneDNN reads plain), and
//    whose groups are 1 or depthwise (or have per-group channels divisible by B), reads its
//    src and writes its output blocked (src_block, dst_block); a fused residual is read in
//    dst's layout. oneDNN has no direct kernel for a plain src of more channels with a blocked
//    dst (it would run its reference loops), so such a conv stays plain;
//  - every other consumer of a blocked value (any other op, a plain conv, a graph output) gets
//    a plain copy through one inserted channel_block node per value; a blocked conv reading a
//    plain value gets a blocked copy the same way.
// A 1x1 conv of one group is a GEMM either way (oneDNN runs it as fast on plain NCHW), so it
// reads and writes blocked only where that takes no more reordered elements than plain: its
// inputs' copies, and its result's for consumers that want the other layout. In a training
// forward graph, where every conv's input and result are saved as plain graph outputs, the
// 1x1 convs stay plain and only the larger kernels pay reorders at their edges.
// A conv whose channels do not meet these rules for B tries B/2 (down to 8): with B = 16,
// MobileNetV2's 24-channel convs run in nChw8c (oneDNN's AVX2 direct kernels), with 16 <-> 8
// reorders at their edges.
// An [N, C, 1, 1] value whose channels divide by both blocks is the same bytes in either
// layout (one pixel), so it passes between layouts with no copy: a squeeze-excite vector
// between its mean, its two 1x1 convs and its gate.
// Blocked bytes of [N, C, H, W] are a plain [N, C/B, H, W, B], and an [n, C, 1, 1] operand is
// [n, C/B, 1, 1, B] in any layout, so two more kinds of op run on blocked values through
// reshapes (aliases, no copy) to those 5-d views:
//  - an f32 elementwise node (one op or fused_elementwise) with a blocked input of its own
//    shape, whose other inputs broadcast over all channels or none ([n, C, 1, 1], [n, 1, h, w],
//    scalars; full-size inputs are reordered), when that takes fewer reorders than running it
//    plain (counting the copies its inputs lack and what its consumers want); its result stays
//    blocked. A squeeze-excite gate, or a standalone activation between two convs;
//  - sum / mean / amax / amin over H and W of a blocked value with no plain copy yet: the
//    result is the plain [N, C, 1, 1] or [N, C] (a squeeze-excite pooling, a global pool).
//  - max_pool2d / avg_pool2d of a blocked value with no plain copy yet pool in its layout
//    (their `block` attribute) and their result keeps it (ResNet's stem pool);
//  - channels-last only: a permute to [N, H, W, C] of a channels-last value is a reshape of its
//    bytes, and a permute of a plain [N, H, W, C] to NCHW that a conv or an any-layout op
//    reads is a reshape too, whose result is kept channels-last (ConvNeXt's layer norms over
//    channels, between depthwise convs).
// What it does not do: adaptive pooling, other reductions and ops stay plain (a channel_block
// pair around them); channels not divisible by 8 are not padded (measured: padding MobileNetV3's
// 24/72 channels to 32/80 to run oneDNN's AVX-512 kernels instead of its AVX2 ones gained
// nothing, docs/BENCHMARKS.md). Other values of B (keeps_conv_layout) leave the graph unchanged.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Whether the pass keeps a layout for CompileOptions::channel_block `block`: 8, 16 or
// kChannelsLast (0 plain and -1 unresolved do nothing).
bool keeps_conv_layout(int block);

// Returns whether the graph changed.
bool block_conv_layout(Graph& g, int block);

}  // namespace updraft
