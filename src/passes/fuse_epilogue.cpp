// fuse_epilogue: folds the ops that follow conv2d / linear / matmul into the op's epilogue
// (oneDNN post-ops), so the output is written once:
//   y = op(x, w); y = y + bias; y = y + residual; y = act(y)   ->   op(x, w, bias, residual){...}
// The epilogue computes act(op + bias + residual), so the stages are taken in that order
// only: a bias after a residual, or any add after the activation, ends the chain. Each
// intermediate must have exactly one user (the next stage) and must not be a graph output.
// For linear/matmul, one reshape that keeps the last dim may precede the residual add or the
// activation (the front end views [B*S, N] results back to [B, S, N]); it moves after the op.
// A bias is a constant whose values vary along the channel dim (conv2d: [O,1,1] or [1,O,1,1])
// or the last dim (linear/matmul: [N] or [1,..,1,N]) and whose add keeps the output's type;
// a residual is any value already typed like the output.
#include "passes/fuse_epilogue.h"

#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "passes/constant_fold.h"

namespace updraft {

namespace {

// The single node consuming v, when v has exactly one use and is not a graph output.
Node* sole_user(const Graph& g, const Value* v) {
  if (g.use_count(v) != 1 || g.is_output(v)) return nullptr;
  auto users = g.users(v);
  return users.size() == 1 ? users[0] : nullptr;
}

// The other operand of a binary add whose one operand is y, or null.
Value* add_partner(const Node* add, const Value* y) {
  if (add->op_name() != "add" || add->inputs.size() != 2) return nullptr;
  if (add->inputs[0] == y) return add->inputs[1];
  if (add->inputs[1] == y) return add->inputs[0];
  return nullptr;
}

// Channel position of the bias: dim 1 for conv2d (NCHW), the last dim otherwise.
bool is_bias_shaped(const std::string& op, const Value* c, const TensorType& out) {
  if (!c->is_constant() || c->type.dtype != out.dtype || out.shape.empty()) return false;
  int rank = static_cast<int>(out.shape.size());
  int ch_dim = op == "conv2d" ? 1 : rank - 1;
  if (ch_dim >= rank || !out.shape[ch_dim].is_static()) return false;
  int64_t channels = out.shape[ch_dim].value();
  const auto& s = c->constant->shape();
  int crank = static_cast<int>(s.size());
  if (crank > rank || c->constant->numel() != channels) return false;
  // Aligned to the right like broadcasting: only the channel position may be non-1.
  for (int i = 0; i < crank; ++i) {
    int out_dim = rank - crank + i;
    if (out_dim != ch_dim && s[i] != 1) return false;
  }
  return crank >= rank - ch_dim;  // the constant reaches the channel position
}

// The activation `n` applies, in epilogue terms, or false when it has no epilogue form: an
// elementwise node whose op's row allows it (ir/elementwise_ops.def), reading x and immediates
// only (its attributes), which become act_alpha / act_beta.
bool activation_of(const Node* n, Epilogue& e) {
  const EwNodeInfo* row = ew_node_info(n->op_name());
  if (!row || row->op == EwOp::cast || n->inputs.size() != 1) return false;
  if (row->op == EwOp::gelu) {  // only the two forms oneDNN and the kernels know
    const std::string& approx = n->attr("approximate").s();
    if (approx != "none" && approx != "tanh") return false;
  }
  EwInstr ins = ew_instr_for_node(*n);
  if (ew_op_info(ins.op).epi == EwEpi::no || ins.args.size() > 3) return false;
  double params[2] = {0, 0};
  for (size_t k = 1; k < ins.args.size(); ++k) {
    if (ins.args[k].kind != EwOperand::Kind::imm) return false;
    params[k - 1] = ins.args[k].imm;
  }
  e.act = ins.op;
  e.alpha = params[0];
  e.beta = params[1];
  return true;
}

// A bias constant reshaped to one dim ([channels]), as the epilogue's bias input expects.
// Written as a reshape node folded at once, so the fold is recorded (Graph::record_fold).
Value* flat_bias(Graph& g, Value* c, Node* before) {
  if (c->constant->shape().size() == 1) return c;
  g.set_insert_point(before);
  Node* r = g.add_node("reshape", {c}, {{"shape", Attr(std::vector<int64_t>{c->constant->numel()})}});
  g.set_insert_point(nullptr);
  Value* out = r->output();
  if (fold_constant_node(g, r, /*always=*/true)) out = g.value(g.folds().back().outputs.at(0));
  out->name = c->name;
  return out;
}

// Whether a reshape from `from` to `to` keeps the last dim (only leading dims merge or split),
// so a per-channel epilogue means the same thing on either side of it.
bool keeps_last_dim(const TensorType& from, const TensorType& to) {
  return !from.shape.empty() && !to.shape.empty() && from.shape.back() == to.shape.back() &&
         from.dtype == to.dtype;
}

// Rewrite op -> [add bias] -> [reshape] -> [add residual] -> [activation] into one op with an
// epilogue (and the reshape after it).
bool fuse_one(Graph& g, Node* n, std::unordered_set<const Node*>& removed) {
  if (n->outputs.size() != 1 || n->attr("activation").s() != "none") return false;
  Epilogue e;
  Value* bias = nullptr;      // the absorbed bias constant, if any
  Value* residual = nullptr;  // the absorbed residual, if any
  e.has_bias = n->attr("has_bias").b();
  e.has_residual = n->attr("has_residual").b();
  const TensorType out_t = n->output()->type;
  std::vector<Node*> chain;  // absorbed nodes, in order
  Value* y = n->output();
  Node* u = sole_user(g, y);
  if (u && !e.has_bias && !e.has_residual) {
    Value* c = add_partner(u, y);
    if (c && is_bias_shaped(n->op_name(), c, out_t) && u->output()->type == out_t) {
      e.has_bias = true;
      bias = c;
      chain.push_back(u);
      y = u->output();
      u = sole_user(g, y);
    }
  }
  // A reshape that keeps the last dim (a linear on [B*S, K] viewed back as [B, S, N]) may sit
  // between the op and its residual add / activation: both are elementwise, so they commute
  // with it. The fused op then computes in its own shape, the residual is viewed to that
  // shape, and one reshape after the fused op gives the chain's shape back.
  Node* view = nullptr;
  TensorType chain_t = out_t;  // the type every absorbed stage has
  if (u && u->op_name() == "reshape" && n->op_name() != "conv2d" && keeps_last_dim(out_t, u->output()->type)) {
    Node* after = sole_user(g, u->output());
    Epilogue probe;
    bool useful = after && ((!e.has_residual && add_partner(after, u->output())) ||
                            (after->inputs.size() == 1 && activation_of(after, probe)));
    if (useful) {
      view = u;
      chain_t = u->output()->type;
      y = u->output();
      u = after;
    }
  }
  if (u && !e.has_residual) {
    Value* r = add_partner(u, y);
    if (r && r != y && r->type == chain_t && u->output()->type == chain_t) {
      e.has_residual = true;
      residual = r;
      chain.push_back(u);
      y = u->output();
      u = sole_user(g, y);
    }
  }
  if (u && u->inputs.size() == 1 && u->output()->type == chain_t && activation_of(u, e)) chain.push_back(u);
  if (chain.empty()) return false;
  if (view) chain.insert(chain.begin() + (bias ? 1 : 0), view);

  std::vector<Value*> inputs = n->inputs;  // main inputs plus any bias/residual already fused
  Attrs attrs = n->attrs;
  if (bias) {  // only taken when n had no bias or residual, so order stays bias, residual
    inputs.push_back(flat_bias(g, bias, n));
    attrs["has_bias"] = Attr(true);
  }
  if (residual) {
    Value* r = residual;
    if (view) {  // the residual in the op's own shape: a view of it, before the chain ends
      g.set_insert_point(chain.back());
      r = g.add_node("reshape", {r}, {{"shape", Attr::from_dims(out_t.shape)}})->output();
      g.set_insert_point(nullptr);
    }
    inputs.push_back(r);
    attrs["has_residual"] = Attr(true);
  }
  if (e.act) attrs["activation"] = Attr(ew_op_info(*e.act).name);
  if (e.num_act_params() > 0) {
    attrs["act_alpha"] = Attr(e.alpha);
    attrs["act_beta"] = Attr(e.beta);
  }
  Node* last = chain.back();
  // Every input exists before the chain's last node (the residual may be computed after n).
  g.set_insert_point(last);
  Node* fused = g.add_node(n->op_name(), std::move(inputs), std::move(attrs));
  Graph::merge_origin(fused, n);
  for (Node* c : chain) Graph::merge_origin(fused, c);
  Value* result = fused->output();
  if (view) result = g.add_node("reshape", {result}, view->attrs)->output();
  g.set_insert_point(nullptr);
  UPDRAFT_CHECK(result->type == last->output()->type, "fuse_epilogue",
                "fused " + n->op_name() + " is typed " + result->type.str() + ", the chain ended in " +
                    last->output()->type.str() + "; this is a bug in fuse_epilogue");
  result->name = last->output()->name;
  g.replace_all_uses(last->output(), result);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    removed.insert(*it);
    g.remove_node(*it);
  }
  g.remove_node(n);
  return true;
}

}  // namespace

bool fuse_epilogue(Graph& g) {
  bool changed = false;
  std::unordered_set<const Node*> removed;  // chain nodes later in the snapshot, now gone
  for (Node* n : g.nodes()) {
    if (removed.count(n)) continue;
    const std::string& op = n->op_name();
    if (op == "conv2d" || op == "linear" || op == "linear_wq" || op == "matmul") changed |= fuse_one(g, n, removed);
  }
  return changed;
}

}  // namespace updraft
