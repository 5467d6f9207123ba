#include "passes/block_conv_layout.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "ir/op_table.h"
#include "kernels/channel_block.h"

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

// A 1x1 conv of one group: a GEMM over the pixels in either layout. oneDNN runs it as fast on
// plain NCHW (its gemm-based convolution) as on channels-last (brgconv_1x1): ResNet-50's 36
// at batch 8, 2 threads, 175 against 179 ms a step (docs/BENCHMARKS.md, "Issue 17: plain 1x1
// convolutions in training graphs"). So it takes a blocked layout only where that saves
// reorders (Rewriter::blocked_conv_pays); larger kernels gain from the layout whatever it costs
// at their edges (3x3: 132 against 185 ms).
bool is_pointwise(const Node& n) {
  const Shape& w = n.input(1)->type.shape;
  return n.attr("groups").i() == 1 && w.size() == 4 && w[2].is_static() && w[2].value() == 1 &&
         w[3].is_static() && w[3].value() == 1;
}

// Elements of v where its shape is static, else 1 (a copy counted once).
int64_t elements(const Value* v) {
  int64_t e = 1;
  for (const Dim& d : v->type.shape) {
    if (!d.is_static()) return 1;
    e *= d.value();
  }
  return e;
}

// The ops that can run on blocked bytes seen as [N, C/B, H, W, B] (Rewriter::elementwise,
// Rewriter::spatial_reduction).
// One output: a fused program's extra results (fuse_elementwise) would need their own layouts.
bool is_elementwise(const Node& n) {
  return (n.op->cls == OpClass::Elementwise || n.op_name() == "fused_elementwise") && n.outputs.size() == 1;
}
bool is_column_reduction(const Node& n) {
  const std::string& op = n.op_name();
  return op == "sum" || op == "mean" || op == "amax" || op == "amin";  // the CPU kernel's column path
}

// Pools that read and write any layout (their `block` attribute, Rewriter::pool).
bool is_pool(const Node& n) { return n.op_name() == "max_pool2d" || n.op_name() == "avg_pool2d"; }

// Consumers that run on a value in any layout (Rewriter::elementwise, spatial_reduction, pool).
bool takes_any_layout(const Node& n) { return is_elementwise(n) || is_column_reduction(n) || is_pool(n); }

bool static_4d(const Shape& s) {
  if (s.size() != 4) return false;
  for (const Dim& d : s)
    if (!d.is_static()) return false;
  return true;
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

// An input of an elementwise node run on blocked bytes: the layout it is read in and its
// 5-d view ([n, C/B, h, w, B], or [n, 1, h, w, 1] for one channel).
struct View {
  int64_t layout;
  std::vector<int64_t> shape;
};

class Rewriter {
 public:
  Rewriter(Graph& g, int64_t block) : g_(g), block_(block) {}

  int64_t layout(const Value* v) const {
    auto it = layout_.find(const_cast<Value*>(v));  // a lookup; the map's keys are mutable for their origins
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

  // v's bytes seen as `shape`: a reshape inserted before `before` (an alias, no copy).
  Value* reshape(Value* v, std::vector<int64_t> shape, Node* before) {
    g_.set_insert_point(before);
    Value* r = g_.add_node("reshape", {v}, {{"shape", Attr(std::move(shape))}})->output(0);
    g_.set_insert_point(nullptr);
    return r;
  }

  // The layouts a conv reads and writes. Channels-last: every f32 conv with static channel
  // counts, an image included (oneDNN's nhwc kernels need an nhwc src; the image's copy is
  // small). Blocked: the largest block (B, then B/2 down to 8) whose rules it meets (with
  // B = 16, a conv of 24 channels runs in nChw8c rather than plain); an image (at most 4
  // channels) is read plain.
  std::pair<int64_t, int64_t> conv_layouts(const Node& n) const {
    if (block_ == kChannelsLast) {
      const int64_t in_c = static_channels(n.input(0)), out_c = static_channels(n.output(0));
      if (n.op_name() != "conv2d" || n.output(0)->type.dtype != DType::f32 || in_c < 0 || out_c < 0) return {0, 0};
      return {in_c, out_c};
    }
    int64_t b = 0;
    for (int64_t cand = block_; cand >= 8 && b == 0; cand /= 2)
      if (blockable_conv(n, cand)) b = cand;
    return {b != 0 && static_channels(n.input(0)) > kMaxImageChannels ? b : 0, b};
  }

  void conv(Node* n) {
    auto [src, dst] = conv_layouts(*n);
    if ((src != 0 || dst != 0) && is_pointwise(*n) && !blocked_conv_pays(n, src, dst)) src = dst = 0;
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

  // Elements copied to give v layout `want`: none when it has it, a copy already exists, or
  // it is a graph output wanted plain (outputs() copies those in any case).
  int64_t copy_cost(const Value* v, int64_t want) const {
    const int64_t have = layout(v);
    if (have == want || same_memory(v, have, want) || copies_.count({v, want})) return 0;
    if (want == 0 && g_.is_output(v)) return 0;
    return elements(v);
  }

  // Whether a pointwise conv n run in layouts (src, dst) copies no more elements than run
  // plain: its inputs' copies into either layout, plus its result's for the consumers that want
  // the other one (a graph output or a plain op wants it plain, a conv reading blocked wants it
  // blocked; ops that take any layout, and pointwise convs, which choose here in turn, count for
  // neither). Ties stay blocked.
  bool blocked_conv_pays(const Node* n, int64_t src, int64_t dst) const {
    int64_t blocked = copy_cost(n->input(0), src), plain = copy_cost(n->input(0), 0);
    if (n->attr("has_residual").b()) {
      const Value* r = n->inputs.back();
      blocked += copy_cost(r, dst);
      plain += copy_cost(r, 0);
    }
    const Value* out = n->output(0);
    const Wanted w = wanted(out, dst, /*pointwise_undecided=*/true);
    if (w.plain) blocked += elements(out);
    if (w.blocked) plain += elements(out);
    return blocked <= plain;
  }

  // Which layouts v's consumers want it in, were it produced in layout b: plain for a graph
  // output, a plain op or a conv reading plain; blocked for a conv reading blocked (and plain
  // too where that conv's block is not b: 16 <-> 8 is a copy either way). Ops that take any
  // layout want neither, and so do 1x1 convs where `pointwise_undecided` (they choose by their
  // own edges, blocked_conv_pays).
  struct Wanted {
    bool plain = false, blocked = false;
  };
  Wanted wanted(const Value* v, int64_t b, bool pointwise_undecided) const {
    Wanted w;
    w.plain = g_.is_output(v);
    for (const Node* u : g_.users(v)) {
      if (u->op_name() == "conv2d") {
        if (pointwise_undecided && is_pointwise(*u)) continue;
        const int64_t src = conv_layouts(*u).first;
        (src == 0 ? w.plain : w.blocked) = true;
        if (src != 0 && src != b) w.plain = true;
      } else if (!takes_any_layout(*u)) {
        w.plain = true;
      }
    }
    return w;
  }

  // An elementwise node (one op or a fused chain, f32) with a blocked input of its own shape
  // runs on the blocked bytes: blocked [N, C, H, W] is [N, C/B, H, W, B] read plainly, an
  // [n, C, 1, 1] operand is [n, C/B, 1, 1, B] in either layout, an [n, 1, h, w] one is
  // [n, 1, h, w, 1]. Reshapes (aliases, no copy) give the node those 5-d views and take its
  // result back to [N, C, H, W], which stays blocked. Returns false (nothing changed) when
  // the node or an input does not fit.
  bool elementwise(Node* n) {
    if (!is_elementwise(*n) || n->outputs.size() != 1) return false;
    const TensorType& out = n->output(0)->type;
    if (out.dtype != DType::f32 || !static_4d(out.shape)) return false;
    int64_t b = 0;
    for (Value* in : n->inputs) {
      const int64_t l = layout(in);
      if (l != 0 && in->type.shape == out.shape && !same_memory(in, l, 0)) {
        b = l;
        break;
      }
    }
    if (b == 0) return false;
    const int64_t c = out.shape[1].value();
    std::vector<View> views;  // per input
    for (Value* in : n->inputs) {
      const Shape& s = in->type.shape;
      if (in->type.dtype != DType::f32 || s.size() > 4) return false;
      std::vector<int64_t> d(4 - s.size(), 1);
      for (const Dim& x : s) {
        if (!x.is_static()) return false;
        d.push_back(x.value());
      }
      if (d[1] == 1) views.push_back({0, {d[0], 1, d[2], d[3], 1}});
      else if (d[1] != c) return false;
      else if (d[2] * d[3] == 1) views.push_back({0, {d[0], c / b, 1, 1, b}});  // same bytes plain or blocked
      else if (in->type.shape == out.shape || layout(in) == b) views.push_back({b, {d[0], c / b, d[2], d[3], b}});
      else return false;  // a partial broadcast ([n, C, 1, W]) left plain
    }
    if (!blocked_pays(n, views, b)) return false;
    std::vector<Value*> ins;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      Value* v = as_layout(n->inputs[k], views[k].layout, n);
      ins.push_back(reshape(v, views[k].shape, n));
    }
    layout_[on_views(n, ins)] = b;
    return true;
  }

  // Whether running elementwise node n in layout b (its inputs as `views` says) takes fewer
  // reorders than running it plain: inputs that would need a copy they do not have yet, plus
  // one for the output when a consumer wants the other layout. Consumers that are elementwise,
  // spatial reductions or pools take either. Ties stay plain.
  bool blocked_pays(const Node* n, const std::vector<View>& views, int64_t b) const {
    int plain = 0, blocked = 0;
    std::vector<const Value*> seen;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      const Value* v = n->inputs[k];
      if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
      seen.push_back(v);
      const int64_t have = layout(v);
      if (have != 0 && !same_memory(v, have, 0) && !copies_.count({v, 0})) ++plain;
      if (views[k].layout != 0 && have != views[k].layout && !copies_.count({v, views[k].layout}))
        ++blocked;
    }
    // A 1x1 conv consumer counts as wanting the layout it would read by itself: the inference
    // plans were measured with this rule (docs/decisions.md).
    const Wanted w = wanted(n->output(0), b, /*pointwise_undecided=*/false);
    return blocked + w.plain < plain + w.blocked;
  }

  // A sum / mean / amax / amin over H and W of a blocked [N, C, H, W] reads the blocked bytes
  // as [N, C/B, H, W, B]; the result ([N, C/B, 1, 1, B] or [N, C/B, B]) is the plain [N, C, 1, 1]
  // or [N, C], so nothing is copied either side (a squeeze-excite block's pooling).
  bool spatial_reduction(Node* n) {
    if (!is_column_reduction(*n)) return false;
    Value* x = n->input(0);
    const int64_t b = layout(x);
    // A plain copy made for another consumer serves it as well.
    if (b == 0 || same_memory(x, b, 0) || copies_.count({x, 0}) || x->type.dtype != DType::f32 ||
        !static_4d(x->type.shape))
      return false;
    std::vector<int64_t> dims = n->attr("dims").ints();
    for (int64_t& d : dims) d = d < 0 ? d + 4 : d;
    std::sort(dims.begin(), dims.end());
    if (dims != std::vector<int64_t>{2, 3}) return false;
    const Shape& s = x->type.shape;
    on_views(n, {reshape(x, {s[0].value(), s[1].value() / b, s[2].value(), s[3].value(), b}, n)});
    return true;
  }

  // A max or average pool of a value kept in a layout, with no plain copy yet, pools in that
  // layout (oneDNN pools every layout) and its result keeps it: ResNet's stem pool between two
  // convs takes no copies. Its result is at most x's size, so where a consumer wants it plain,
  // that copy costs less than x's would.
  bool pool(Node* n) {
    if (!is_pool(*n)) return false;
    Value* x = n->input(0);
    const int64_t b = layout(x);
    if (b == 0 || same_memory(x, b, 0) || copies_.count({x, 0}) || x->type.dtype != DType::f32 || x->rank() != 4)
      return false;
    n->attrs["block"] = Attr(b);
    layout_[n->output(0)] = b;
    changed_ = true;
    return true;
  }

  // Whether a consumer of v could read it channels-last: a conv that reads channels-last, or an
  // op that takes any layout.
  bool reads_channels_last(const Value* v) const {
    for (const Node* u : g_.users(v))
      if (u->op_name() == "conv2d" ? conv_layouts(*u).first != 0 : takes_any_layout(*u)) return true;
    return false;
  }

  // Permutes between NCHW and NHWC are views of channels-last bytes (ConvNeXt permutes each
  // depthwise conv's output for a layer norm over channels, and the block's result back):
  //  - [0, 2, 3, 1] of a channels-last value (block = its channel count): its bytes are the
  //    plain [N, H, W, C] result, a reshape;
  //  - [0, 3, 1, 2] of a plain [N, H, W, C], in channels-last mode: its bytes are the result in
  //    channels-last, seen through [N, 1, H, W, C] (the 5-d view of channels-last bytes that
  //    the elementwise rewrite uses, and the debug captures follow). The result stays
  //    channels-last: a conv or a blocked elementwise op reads it as it is; a plain consumer
  //    gets one copy, a transpose as the permute was. Only where some consumer can read it so
  //    (reads_channels_last): else the permute stays, the copy it is.
  bool nhwc_permute(Node* n) {
    if (n->op_name() != "permute" || n->output(0)->type.dtype != DType::f32) return false;
    Value* x = n->input(0);
    if (!static_4d(x->type.shape)) return false;
    std::vector<int64_t> dims = n->attr("dims").ints();
    for (int64_t& d : dims) d = d < 0 ? d + 4 : d;
    std::vector<int64_t> out;
    for (const Dim& d : n->output(0)->type.shape) out.push_back(d.value());
    Value* r = nullptr;
    if (dims == std::vector<int64_t>{0, 2, 3, 1} && layout(x) != 0 && layout(x) == static_channels(x)) {
      r = reshape(x, out, n);
    } else if (dims == std::vector<int64_t>{0, 3, 1, 2} && block_ == kChannelsLast && layout(x) == 0 &&
               reads_channels_last(n->output(0))) {
      const Shape& s = x->type.shape;
      r = reshape(reshape(x, {s[0].value(), 1, s[1].value(), s[2].value(), s[3].value()}, n), out, n);
      layout_[r] = out[1];
    } else {
      return false;
    }
    g_.replace_all_uses(n->output(0), r);  // carries the permute's provenance to r
    g_.remove_node(n);
    changed_ = true;
    return true;
  }

  // Replaces n by the same op over `views` (its inputs' 5-d views) and a reshape of the result
  // back to n's static shape, which it returns.
  Value* on_views(Node* n, const std::vector<Value*>& views) {
    g_.set_insert_point(n);
    Node* m = g_.add_node(*n->op, views, n->attrs);
    g_.set_insert_point(nullptr);
    Graph::merge_origin(m, n);
    std::vector<int64_t> back;
    for (const Dim& d : n->output(0)->type.shape) back.push_back(d.value());
    Value* r = reshape(m->output(0), std::move(back), n);
    g_.replace_all_uses(n->output(0), r);
    g_.remove_node(n);
    changed_ = true;
    return r;
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
  std::map<std::pair<const Value*, int64_t>, Value*> copies_;
  bool changed_ = false;
};

}  // namespace

bool keeps_conv_layout(int block) { return block > 0 || block == kChannelsLast; }

bool block_conv_layout(Graph& g, int block) {
  if (!keeps_conv_layout(block)) return false;
  Rewriter rw(g, block);
  for (Node* n : g.nodes()) {
    if (n->op_name() == "conv2d") rw.conv(n);
    else if (!rw.elementwise(n) && !rw.spatial_reduction(n) && !rw.pool(n) && !rw.nhwc_permute(n)) rw.other(n);
  }
  rw.outputs();
  rw.blocked_values_lose_origin();
  return rw.changed();
}

}  // namespace updraft
