// Pass: fuse_elementwise. Fuses chains and DAGs of f32 elementwise ops into one
// fused_elementwise node whose kernel makes a single pass over memory.
//
// What it fuses: starting from the last node, a group grows backwards through producers that
// are Elementwise ops with a program form (not cast/bitwise), read f32 data (where's condition
// may be bool) and produce f32 or bool; and casts of bool to f32, which a program computes as
// where(b, 1, 0) (a dropout mask or a ReLU gradient's mask joins the multiply that reads it).
// A producer whose value is also a graph output or read outside the group joins as an extra
// result of the fused node when it is f32 and every outside reader comes after the group's
// root (an optimizer step's new moments, which its parameter update reads: one pass reads
// p, g, m, v and writes p, m, v, where three programs read m and v twice). Groups of one node
// are left alone (nothing to gain). Single-element f32/bool constants become immediates.
// A group holds at most kMaxNodes nodes and kMaxInputs tensor inputs, which keeps every
// program inside the CPU kernel's stack blocks (inputs + immediates + live values <= 8 + 32 +
// 16 <= 64 slots).
// What it does not do: fuse into reductions/matmuls (fuse_epilogue does that), duplicate work
// for multi-use intermediates (they are extra results or stay out), fuse f64/int ops, or
// absorb a producer of another shape than the root's: a program computes every instruction
// once per output element, so a broadcast producer (a 0-d bias correction pow(beta, step) of
// an optimizer step, a per-row rsqrt) would be recomputed for every element it is broadcast to
// (C library pow: ~20 ns each, over a 2.4M-element weight). It stays a node of its own size,
// or the root of a smaller program, and the program reads it broadcast.
//
// ## The `program` attribute (format spec)
//
//   program := dtype ":" instr (";" instr)* ("|" ("%" k)+)?
//   dtype   := "f32" | "bool"          the node's output dtype (bool stores result != 0)
//   instr   := op operand*             exactly the op's arity, separated by spaces
//   operand := "$" k                   input k, broadcast to the output shape (f32, or bool as 0/1)
//            | "%" k                   the result of instruction k (k earlier than this one)
//            | "#" number              an immediate (printed with %.17g; inf/nan allowed)
//
// Instructions are evaluated in order in f32; the last one is the node's result (output 0), and
// the instructions after "|" are outputs 1, 2, ... (f32, output 0's shape). Ops are the
// program ops of src/ir/elementwise_ops.def (every row of form any/program, with its arity),
// with attributes as trailing operands in the row's order, e.g. "leaky_relu x #slope",
// "clamp x #lo #hi"; pow_scalar x e is "pow x #e", gelu approximate="tanh" is "gelu_tanh x".
// Truth values (compares, isnan, logical_*) are 1.0/0.0 inside a program.
// Example: x * sigmoid(x) + b * 0.5  ->  "f32: sigmoid $0; mul $0 %0; mul $1 #0.5; add %1 %2"
#include "passes/fuse_elementwise.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "ir/elementwise_program.h"
#include "ir/op_table.h"

namespace updraft {
namespace {

constexpr size_t kMaxNodes = 16;
constexpr size_t kMaxInputs = 8;

bool is_bool_to_f32(const Node* n) {
  return n->op_name() == "cast" && n->inputs.size() == 1 && n->input(0)->type.dtype == DType::boolean &&
         n->output(0)->type.dtype == DType::f32;
}

// Node n as a program instruction (its inputs as operands 0..k-1).
EwInstr program_instr(const Node& n) {
  if (!is_bool_to_f32(&n)) return ew_instr_for_node(n);
  EwInstr ins;
  ins.op = EwOp::where;
  ins.args = {EwOperand::in(0), EwOperand::value(1.0), EwOperand::value(0.0)};
  return ins;
}

// Can node n be part of a fused program?
bool fusible(const Node* n) {
  if (is_bool_to_f32(n)) return true;
  if (n->op->cls != OpClass::Elementwise || n->op_name() == "cast" || n->outputs.size() != 1) return false;
  EwInstr ins = ew_instr_for_node(*n);
  if (!ew_op_info(ins.op).in_program) return false;
  for (size_t k = 0; k < n->inputs.size(); ++k) {
    DType want = (ins.op == EwOp::where && k == 0) ? DType::boolean : DType::f32;
    if (n->inputs[k]->type.dtype != want) return false;
  }
  DType out = n->output(0)->type.dtype;
  return out == DType::f32 || out == DType::boolean;
}

struct Group {
  std::vector<Node*> nodes;  // in graph order; back() is the root
  std::set<const Node*> members;
};

// Whether v (produced in the group) is a graph output or read outside the group.
bool escapes(const Graph& g, const Value* v, const Group& grp) {
  if (g.is_output(v)) return true;
  for (const Node* u : g.users(v))
    if (!grp.members.count(u)) return true;
  return false;
}

// Tensor inputs of the group (values produced outside it), in first-use order.
std::vector<Value*> external_inputs(const Group& grp, bool use_immediates) {
  std::vector<Value*> ext;
  for (const Node* n : grp.nodes)
    for (Value* v : n->inputs) {
      if (v->producer && grp.members.count(v->producer)) continue;
      // A one-element literal lives in the program text; a parameter stays an input.
      if (use_immediates && v->literal_scalar()) continue;
      if (std::find(ext.begin(), ext.end(), v) == ext.end()) ext.push_back(v);
    }
  return ext;
}

EwProgram build_program(const Group& grp, const std::vector<Value*>& ext, bool use_immediates) {
  EwProgram p;
  p.out_dtype = grp.nodes.back()->output(0)->type.dtype;
  std::unordered_map<const Value*, int> reg;
  for (const Node* n : grp.nodes) {
    EwInstr ins = program_instr(*n);
    for (EwOperand& a : ins.args) {
      if (a.kind != EwOperand::Kind::input) continue;  // immediates from attributes stay
      const Value* v = n->inputs[a.index];
      if (auto it = reg.find(v); it != reg.end()) a = EwOperand::reg(it->second);
      else if (auto imm = use_immediates ? v->literal_scalar() : std::nullopt) a = EwOperand::value(*imm);
      else a = EwOperand::in(static_cast<int>(std::find(ext.begin(), ext.end(), v) - ext.begin()));
    }
    reg[n->output(0)] = static_cast<int>(p.instrs.size());
    p.instrs.push_back(std::move(ins));
  }
  return p;
}

// Whether a producer whose value leaves the group (a graph output, or read by a node outside)
// may join it as an extra result: an f32 value, every outside reader after the root in graph
// order (so the fused node, at the root's place, comes before them, and no outside path leads
// from the value back into the group).
bool may_escape(const Graph& g, const Value* v, const Group& grp, const Node* root,
                const std::unordered_map<const Node*, size_t>& order) {
  if (v->type.dtype != DType::f32) return false;
  for (const Node* u : g.users(v))
    if (!grp.members.count(u) && order.at(u) < order.at(root)) return false;
  return true;
}

// Grows a group backwards from root through fusible producers of the root's shape: those read
// only inside the group, and those whose value also leaves it (may_escape: an extra result).
Group grow_group(Graph& g, Node* root, const std::set<const Node*>& taken,
                 const std::unordered_map<const Node*, size_t>& order) {
  Group grp;
  grp.nodes = {root};
  grp.members = {root};
  bool changed = true;
  while (changed && grp.nodes.size() < kMaxNodes) {
    changed = false;
    for (size_t i = 0; i < grp.nodes.size() && grp.nodes.size() < kMaxNodes; ++i) {
      for (Value* v : grp.nodes[i]->inputs) {
        Node* p = v->producer;
        if (!p || grp.members.count(p) || taken.count(p) || !fusible(p)) continue;
        if (!(p->output(0)->type.shape == root->output(0)->type.shape)) continue;  // broadcast: see header
        if (escapes(g, v, grp) && !may_escape(g, v, grp, root, order)) continue;
        grp.nodes.push_back(p);
        grp.members.insert(p);
        if (external_inputs(grp, true).size() > kMaxInputs) {  // undo: too many tensor inputs
          grp.nodes.pop_back();
          grp.members.erase(p);
          continue;
        }
        changed = true;
      }
    }
  }
  std::sort(grp.nodes.begin(), grp.nodes.end(),
            [&](const Node* a, const Node* b) { return order.at(a) < order.at(b); });
  return grp;
}

// Replaces the group by one fused node at the root's position. Returns false (graph
// untouched) if no valid fused node could be formed.
bool replace_group(Graph& g, const Group& grp, std::unordered_map<const Node*, size_t>& order) {
  Node* root = grp.nodes.back();
  // Members whose value leaves the group: the program's extra results, in group order.
  std::vector<int> also;
  for (size_t i = 0; i + 1 < grp.nodes.size(); ++i)
    if (escapes(g, grp.nodes[i]->output(0), grp)) also.push_back(static_cast<int>(i));
  // Immediates drop their (all-ones) shapes; if that would lower the output rank, retry with
  // the constants as tensor inputs.
  for (bool use_imm : {true, false}) {
    std::vector<Value*> ext = external_inputs(grp, use_imm);
    if (ext.empty() || ext.size() > kMaxInputs) continue;
    EwProgram p = build_program(grp, ext, use_imm);
    p.also = also;
    g.set_insert_point(root);
    Node* fused = g.add_node("fused_elementwise", ext, {{"program", Attr(p.str())}});
    g.set_insert_point(nullptr);
    bool same = fused->output(0)->type == root->output(0)->type;
    for (size_t k = 0; k < also.size(); ++k)
      same = same && fused->output(k + 1)->type == grp.nodes[also[k]]->output(0)->type;
    if (!same) {
      g.remove_node(fused);
      continue;
    }
    order[fused] = order.at(root);  // its place, for may_escape's order test of later groups
    for (Node* m : grp.nodes) Graph::merge_origin(fused, m);
    for (size_t k = 0; k < also.size(); ++k)
      g.replace_all_uses(grp.nodes[also[k]]->output(0), fused->output(k + 1));
    g.replace_all_uses(root->output(0), fused->output(0));
    for (auto it = grp.nodes.rbegin(); it != grp.nodes.rend(); ++it) g.remove_node(*it);
    return true;
  }
  return false;
}

}  // namespace

bool fuse_elementwise(Graph& g) {
  std::vector<Node*> nodes = g.nodes();
  std::unordered_map<const Node*, size_t> order;
  for (size_t i = 0; i < nodes.size(); ++i) order[nodes[i]] = i;
  std::set<const Node*> taken;  // grouped (and possibly removed: never dereferenced again)
  bool changed = false;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* root = *it;
    if (taken.count(root) || !fusible(root)) continue;
    Group grp = grow_group(g, root, taken, order);
    if (grp.nodes.size() < 2) continue;
    for (const Node* n : grp.nodes) taken.insert(n);
    changed |= replace_group(g, grp, order);
  }
  return changed;
}

}  // namespace updraft
