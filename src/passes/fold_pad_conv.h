// Pass: fold_pad_conv. A zero `pad` of only the last two dims that feeds conv2d becomes the
// conv's own padding (padding = top/left, padding_end = bottom/right when they differ), so the
// padded copy is never made. TF-style "same" padding (HF MobileNet, EfficientNet) writes these
// pads explicitly. Not folded: a non-zero pad value, negative amounts (crops), pads of the
// batch or channel dims. The pad stays for its other users (dce drops it when none are left).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_pad_conv(Graph& g);

}  // namespace updraft
