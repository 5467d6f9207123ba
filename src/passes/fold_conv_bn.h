// Pass: fold_conv_bn. Folds batch_norm (inference) that follows conv2d with constant weights into the conv's weights and bias.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_conv_bn(Graph& g);

}  // namespace updraft
