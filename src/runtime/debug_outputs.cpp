// Debug outputs: a second Executable over a copy of a compiled graph whose outputs are every
// node output (runtime/debug_outputs.h).
#include "runtime/debug_outputs.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/text.h"

namespace updraft {

namespace {

// A plain [N, H, W, C] seen as [N, 1, H, W, C]: block_conv_layout's view of a permute to NCHW
// whose result it keeps channels-last (the reshape after it is that result). The front end's
// reshape chains are merged into one reshape before that pass, so only it makes this pair.
bool nhwc_as_view(const Node* n) {
  const Shape &in = n->input(0)->type.shape, &out = n->output(0)->type.shape;
  if (in.size() != 4 || out.size() != 5 || !(out[1].is_static() && out[1].value() == 1)) return false;
  return in[0] == out[0] && in[1] == out[2] && in[2] == out[3] && in[3] == out[4];
}

// The channel block each node output is stored in (kernels/channel_block.h), where it is not
// plain: a blocked conv's or pool's result, a channel_block copy to a block, and the
// [N, C, H, W] reshape that block_conv_layout puts after an elementwise node it ran on blocked
// bytes seen as [N, C/B, H, W, B] (passes/block_conv_layout.h), or after nhwc_as_view. Those
// 5-d views, and what elementwise ops compute from them, are tensors in their own right (no
// front-end counterpart) and are captured as they are; a view back to [N, C, 1, 1] or [N, C] is
// the same bytes plain. A view's block is its last dim: a per-channel input may come from a
// conv of another block (an 8-blocked squeeze-excite conv scaling a 16-blocked activation),
// whose bytes are plain either way.
std::unordered_map<const Value*, int64_t> stored_blocks(const Graph& g) {
  std::unordered_map<const Value*, int64_t> blocked;
  std::unordered_set<const Value*> views;  // 5-d views of blocked bytes, and results computed on them
  for (const Node* n : g.nodes()) {
    if (n->outputs.size() != 1) continue;
    const Value* out = n->output(0);
    const Shape& s = out->type.shape;
    const std::string& op = n->op_name();
    if (const char* attr = op == "conv2d" ? "dst_block" : op == "channel_block" ? "to_block" :
                           op == "max_pool2d" || op == "avg_pool2d" ? "block" : nullptr) {
      if (n->has_attr(attr) && n->attr(attr).i() != 0) blocked[out] = n->attr(attr).i();
    } else if (op == "reshape" && views.count(n->input(0)) && out->rank() == 4) {
      const bool one_pixel = s[2].is_static() && s[3].is_static() && s[2].value() * s[3].value() == 1;
      const Shape& v = n->input(0)->type.shape;
      if (!one_pixel && v[4].is_static()) blocked[out] = v[4].value();
    } else if (op == "reshape" && nhwc_as_view(n)) {
      views.insert(out);
    } else if (out->rank() == 5) {
      for (const Value* in : n->inputs)
        if (blocked.count(in) || views.count(in)) {
          views.insert(out);
          break;
        }
    }
  }
  return blocked;
}

}  // namespace

std::unique_ptr<Graph> copy_graph(const Graph& g) {
  // Constants by reference ("c<id>"), resolved to the same tensors: nothing is copied, and the
  // text carries no data, however large the weights.
  PrintOptions popts;
  popts.constant_ref = [](const Value* v) { return "c" + std::to_string(v->id); };
  ExternResolver resolve = [&g](const std::string& ref, const TensorType& type) -> Tensor {
    int id = -1;
    try {
      id = std::stoi(ref.substr(1));
    } catch (const std::exception&) {
      throw Error("debug", "copy_graph: bad constant reference '" + ref + "'");
    }
    UPDRAFT_CHECK(ref[0] == 'c' && id >= 0 && static_cast<size_t>(id) < g.num_values() && g.value(id)->is_constant(),
                  "debug", "copy_graph: bad constant reference '" + ref + "'");
    return *g.value(id)->constant;
  };
  ParseOptions opts;
  opts.externs = &resolve;
  std::unique_ptr<Graph> copy = parse_graph(print_graph(g, popts), opts);
  // Node k of the copy stands for node k of g (debug_outputs indexes by it): check it does.
  std::vector<Node*> a = g.nodes(), b = copy->nodes();
  UPDRAFT_CHECK(a.size() == b.size(), "debug",
                "copy_graph: the copy has " + std::to_string(b.size()) + " nodes, the graph " + std::to_string(a.size()));
  for (size_t k = 0; k < a.size(); ++k) {
    UPDRAFT_CHECK(a[k]->op == b[k]->op && a[k]->outputs.size() == b[k]->outputs.size(), "debug",
                  "copy_graph: node " + std::to_string(k) + " is " + a[k]->op_name() + " in the graph, " +
                      b[k]->op_name() + " in the copy");
    // Provenance is a comment in the text: carried over by position.
    b[k]->origin = a[k]->origin;
    for (size_t j = 0; j < a[k]->outputs.size(); ++j) b[k]->outputs[j]->origin = a[k]->outputs[j]->origin;
  }
  return copy;
}

DebugOutputs debug_outputs(const Executable& cg) {
  const Graph& g = cg.graph();
  std::unique_ptr<Graph> copy = copy_graph(g);
  DebugOutputs d;
  std::vector<Value*> outs;
  // The original outputs first; then node k's outputs, taken from node k of the copy (value
  // ids differ between the two graphs, node positions do not).
  std::vector<Node*> a = g.nodes(), b = copy->nodes();
  for (size_t i = 0; i < g.outputs().size(); ++i) outs.push_back(copy->outputs().at(i));
  d.num_outputs = outs.size();
  const OpDef& unblock = OpTable::get().at("channel_block");
  const std::unordered_map<const Value*, int64_t> blocks = stored_blocks(g);
  for (size_t k = 0; k < a.size(); ++k) {
    for (size_t j = 0; j < a[k]->outputs.size(); ++j) {
      CapturedOutput c;
      c.node = static_cast<int>(k);
      c.output = static_cast<int>(j);
      c.value = a[k]->outputs[j]->id;
      auto stored = blocks.find(a[k]->outputs[j]);
      c.block = stored == blocks.end() ? 0 : stored->second;
      Value* v = b[k]->outputs[j];
      // Appended after every node: the blocked value is itself an output, so no later node
      // overwrites it before the copy reads it.
      if (c.block != 0)
        v = copy->add_node(unblock, {v}, {{"from_block", Attr(c.block)}, {"to_block", Attr(int64_t{0})}})->output(0);
      outs.push_back(v);
      d.captured.push_back(c);
    }
  }
  copy->set_outputs(std::move(outs));
  CompileOptions opts = cg.options();
  opts.debug = 0;  // a debugging aid of its own: no pass or plan log on stderr
  d.exe = Executable::from_optimized(std::move(copy), opts, 0.0);
  return d;
}

}  // namespace updraft
