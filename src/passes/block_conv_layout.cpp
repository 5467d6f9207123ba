#include "passes/block_conv_layout.h"

#include <map>
#include <unordered_map>

#include "ir/op_table.h"

namespace updraft {

namespace {

// A conv reading at most this many channels (an RGB/RGBA or grey image) reads them plain and
// writes blocked: oneDNN's "first convolution" kernels; more channels need a blocked src.
constexpr int64_t kMaxImageChannels = 4;

int64_t static_channels(const Value* v) {
  const Shape& s = v->type.shape;
  return s.size() == 4 && s[1].is_static() ? s[1].value() : -1;
}

// Whether oneDNN's blocked direct convolution serves this conv: f32, and groups that are 1,
// depthwise, or whose per-group channel counts divide by the block (else a grouped conv would
// land on a slow implementation in a blocked layout).
bool blockable_conv(const Node& n, int64_t block) {
  if (n.op_name() != "conv2d" || n.output(0)->type.dtype != DType::f32) return false;
  const int64_t in_c = static_channels(n.input(0)), out_c = static_channels(n.output(0));
  if (in_c < 0 || out_c < 0 || out_c % block != 0) return false;
  // The src is blocked too, except a first layer on an image (at most 4 channels), which
  // oneDNN's direct kernels read plain. Other channel counts would need padding.
  if (in_c > kMaxImageChannels && in_c % block != 0) return false;
  const int64_t g = n.attr("groups").i();
  if (g == 1) return true;
  if (g == in_c && g == out_c) return true;  // depthwise
  return (in_c / g) % block == 0 && (out_c / g) % block == 0;
}

// Whether v is stored identically in layouts a and b: an [N, C, 1, 1] tensor whose channels
// divide by both blocks (one pixel: nChw{B}c is plain NCHW), e.g. a pooled squeeze-excite
// vector between its two 1x1 convs.
bool same_memory(const Value* v, int64_t a, int64_t b) {
  const Shape& s = v->type.shape;
  const int64_t c = static_channels(v);
  if (c < 0 || !(s[2].is_static() && s[2].value() == 1 && s[3].is_static() && s[3].value() == 1)) return false;
  return (a == 0 || c % a == 0) && (b == 0 || c % b == 0);
}

class Rewriter {
 public:
  Rewriter(Graph& g, int64_t block) : g_(g), block_(block) {}

  int64_t layout(Value* v) const {
    auto it = layout_.find(v);
    return it == layout_.end() ? 0 : it->second;
  }

  // v in layout `want`: v itself, or a channel_block copy inserted before `before` (null: at the
  // end), made once per (value, layout) and shared by later consumers.
  Value* as_layout(Value* v, int64_t want, Node* before) {
    const int64_t have = layout(v);
    if (have == want || same_memory(v, have, want)) return v;
    auto key = std::make_pair(v, want);
    auto it = copies_.find(key);
    if (it != copies_.end()) return it->second;
    g_.set_insert_point(before);
    Attrs a{{"from_block", Attr(have)}, {"to_block", Attr(want)}};
    Value* r = g_.add_node("channel_block", {v}, std::move(a))->output(0);
    g_.set_insert_point(nullptr);
    if (want == 0) r->origin = v->origin;  // the plain copy holds the front end's result
    layout_[r] = want;
    copies_[key] = r;
    changed_ = true;
    return r;
  }

  void conv(Node* n) {
    // The largest block (B, then B/2 down to 8) whose rules this conv meets: with B = 16, a
    // conv of 24 channels runs in nChw8c rather than plain.
    int64_t b = 0;
    for (int64_t cand = block_; cand >= 8 && b == 0; cand /= 2)
      if (blockable_conv(*n, cand)) b = cand;
    const int64_t dst = b;
    const int64_t src = b != 0 && static_channels(n->input(0)) > kMaxImageChannels ? b : 0;
    n->inputs[0] = as_layout(n->inputs[0], src, n);
    if (n->attr("has_residual").b()) {
      const size_t r = n->inputs.size() - 1;  // the residual follows x, w and the bias
      n->inputs[r] = as_layout(n->inputs[r], dst, n);
    }
    if (src != 0 || dst != 0) {
      n->attrs["src_block"] = Attr(src);
      n->attrs["dst_block"] = Attr(dst);
      layout_[n->output(0)] = dst;
      changed_ = true;
    }
  }

  void other(Node* n) {
    for (Value*& in : n->inputs)
      if (layout(in) != 0) in = as_layout(in, 0, n);
  }

  void outputs() {
    std::vector<Value*> outs = g_.outputs();
    for (Value*& o : outs)
      if (layout(o) != 0) o = as_layout(o, 0, nullptr);
    g_.set_outputs(outs);
  }

  // Provenance (Value::origin) names a result in plain layout: once every plain copy has taken
  // it (as_layout), a value left in blocked bytes gives it up.
  void blocked_values_lose_origin() {
    for (const auto& [v, b] : layout_)
      if (b != 0 && !same_memory(v, b, 0)) v->origin.clear();
  }

  bool changed() const { return changed_; }

 private:
  Graph& g_;
  int64_t block_;
  std::unordered_map<Value*, int64_t> layout_;  // absent: plain
  std::map<std::pair<Value*, int64_t>, Value*> copies_;
  bool changed_ = false;
};

}  // namespace

bool block_conv_layout(Graph& g, int block) {
  if (block <= 0) return false;
  Rewriter rw(g, block);
  for (Node* n : g.nodes()) {
    if (n->op_name() == "conv2d") rw.conv(n);
    else rw.other(n);
  }
  rw.outputs();
  rw.blocked_values_lose_origin();
  return rw.changed();
}

}  // namespace updraft
