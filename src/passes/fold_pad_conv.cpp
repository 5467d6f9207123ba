#include "passes/fold_pad_conv.h"

#include <vector>

namespace updraft {

namespace {

std::vector<int64_t> pair_of(const Node& n, const char* name) {
  std::vector<int64_t> v = n.attr(name).ints();
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

// Rewrite conv2d(pad(x, [l, r, t, b]), w) to conv2d(x, w) {padding += [t, l], padding_end += [b, r]}.
bool fold_one(Node* conv) {
  const Node* pad = conv->input(0)->producer;
  if (pad == nullptr || pad->op_name() != "pad" || pad->attr("value").f() != 0.0) return false;
  const std::vector<int64_t>& p = pad->attr("pads").ints();  // torch order: last dim first
  if (p.size() < 4 || p.size() % 2 != 0) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] < 0 || (i >= 4 && p[i] != 0)) return false;
  const std::vector<int64_t> begin = pair_of(*conv, "padding");
  const std::vector<int64_t> end = conv->attr("padding_end").ints().empty() ? begin : pair_of(*conv, "padding_end");
  const std::vector<int64_t> new_begin = {begin[0] + p[2], begin[1] + p[0]};
  const std::vector<int64_t> new_end = {end[0] + p[3], end[1] + p[1]};
  // Padding wider than the (dilated) kernel would make windows of padding only; leave those
  // rare pads as they are rather than lean on every kernel's handling of them.
  const std::vector<int64_t> dil = pair_of(*conv, "dilation");
  const auto& ws = conv->input(1)->type.shape;
  for (int d = 0; d < 2; ++d) {
    const int64_t extent = dil[d] * (ws[2 + d].value() - 1) + 1;
    if (new_begin[d] >= extent || new_end[d] >= extent) return false;
  }
  conv->inputs[0] = pad->inputs[0];
  conv->attrs["padding"] = Attr(new_begin);
  if (new_end == new_begin) conv->attrs.erase("padding_end");
  else conv->attrs["padding_end"] = Attr(new_end);
  return true;
}

}  // namespace

bool fold_pad_conv(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes())
    if (n->op_name() == "conv2d") changed |= fold_one(n);
  return changed;
}

}  // namespace updraft
