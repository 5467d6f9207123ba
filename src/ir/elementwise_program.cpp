#include "ir/elementwise_program.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::optional<EwOp> ew_op_from_name(const std::string& name) {
  for (int i = 0; i < static_cast<int>(EwOp::count_); ++i)
    if (name == ew_detail::kOps[i].name) return static_cast<EwOp>(i);
  return std::nullopt;
}

const EwNodeInfo* ew_node_info(const std::string& name) {
  for (const EwNodeInfo& n : kEwNodeOps)
    if (name == n.name) return &n;
  return nullptr;
}

std::optional<EwOp> ew_activation_from_name(const std::string& name) {
  auto op = ew_op_from_name(name);
  if (op && ew_op_info(*op).epi != EwEpi::no) return op;
  return std::nullopt;
}

std::string ew_activation_names() {
  std::string s;
  for (const EwOpInfo& i : ew_detail::kOps)
    if (i.epi != EwEpi::no) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

std::string EwProgram::str() const {
  std::string s = std::string(dtype_name(out_dtype)) + ":";
  for (size_t i = 0; i < instrs.size(); ++i) {
    s += (i ? "; " : " ");
    s += ew_op_info(instrs[i].op).name;
    for (const EwOperand& a : instrs[i].args) {
      char buf[40];
      switch (a.kind) {
        case EwOperand::Kind::input: std::snprintf(buf, sizeof buf, " $%d", a.index); break;
        case EwOperand::Kind::reg: std::snprintf(buf, sizeof buf, " %%%d", a.index); break;
        // %.17g round-trips any double (and so any f32 constant) exactly; inf/nan print as words.
        case EwOperand::Kind::imm: std::snprintf(buf, sizeof buf, " #%.17g", a.imm); break;
      }
      s += buf;
    }
  }
  if (!also.empty()) s += " |";
  for (int k : also) s += " %" + std::to_string(k);
  return s;
}

int EwProgram::num_inputs() const {
  int n = 0;
  for (const EwInstr& in : instrs)
    for (const EwOperand& a : in.args)
      if (a.kind == EwOperand::Kind::input) n = std::max(n, a.index + 1);
  return n;
}

EwProgram parse_ew_program(const std::string& text, const std::string& component) {
  EwProgram p;
  size_t colon = text.find(':');
  UPDRAFT_CHECK(colon != std::string::npos, component,
                "program '" + text + "' must start with its output dtype, e.g. \"f32: add $0 $1\"");
  std::string head = trim(text.substr(0, colon));
  if (head == "f32") p.out_dtype = DType::f32;
  else if (head == "bool") p.out_dtype = DType::boolean;
  else throw Error(component, "program output dtype '" + head + "' must be f32 or bool");

  std::string instrs_text = trim(text.substr(colon + 1));
  std::string also_text;
  if (size_t bar = instrs_text.find('|'); bar != std::string::npos) {
    also_text = instrs_text.substr(bar + 1);
    instrs_text = trim(instrs_text.substr(0, bar));
  }
  UPDRAFT_CHECK(instrs_text.empty() || instrs_text.back() != ';', component,
                "program '" + text + "' ends with an empty instruction");
  std::stringstream body(instrs_text);
  std::string item;
  while (std::getline(body, item, ';')) {
    item = trim(item);
    int idx = static_cast<int>(p.instrs.size());
    auto where = [&] { return "instruction %" + std::to_string(idx) + " '" + item + "'"; };
    UPDRAFT_CHECK(!item.empty(), component, "program has an empty " + where());
    std::stringstream words(item);
    std::string name, tok;
    words >> name;
    auto op = ew_op_from_name(name);
    UPDRAFT_CHECK(op && ew_op_info(*op).in_program, component, where() + ": unknown program op '" + name + "'");
    EwInstr ins;
    ins.op = *op;
    while (words >> tok) {
      char* end = nullptr;
      const char* rest = tok.c_str() + 1;
      if (tok.size() >= 2 && (tok[0] == '$' || tok[0] == '%')) {
        long k = std::strtol(rest, &end, 10);
        UPDRAFT_CHECK(*end == '\0' && k >= 0, component, where() + ": bad operand '" + tok + "'");
        if (tok[0] == '%')
          UPDRAFT_CHECK(k < idx, component, where() + ": %" + std::to_string(k) + " is not an earlier result");
        ins.args.push_back(tok[0] == '$' ? EwOperand::in(static_cast<int>(k)) : EwOperand::reg(static_cast<int>(k)));
      } else if (tok.size() >= 2 && tok[0] == '#') {
        double v = std::strtod(rest, &end);
        UPDRAFT_CHECK(*end == '\0', component, where() + ": bad immediate '" + tok + "'");
        ins.args.push_back(EwOperand::value(v));
      } else {
        throw Error(component, where() + ": operand '" + tok + "' must be $input, %result or #immediate");
      }
    }
    int want = ew_op_info(ins.op).arity;
    UPDRAFT_CHECK(static_cast<int>(ins.args.size()) == want, component,
                  where() + ": " + name + " takes " + std::to_string(want) + " operands");
    p.instrs.push_back(std::move(ins));
  }
  UPDRAFT_CHECK(!p.instrs.empty(), component, "program has no instructions");
  std::stringstream extra(also_text);
  std::string tok;
  const int last = static_cast<int>(p.instrs.size()) - 1;
  while (extra >> tok) {
    char* end = nullptr;
    long k = tok.size() >= 2 && tok[0] == '%' ? std::strtol(tok.c_str() + 1, &end, 10) : -1;
    UPDRAFT_CHECK(end && *end == '\0' && k >= 0 && k < last, component,
                  "program '" + text + "': extra result '" + tok + "' must be %k of an instruction before the last");
    UPDRAFT_CHECK(std::find(p.also.begin(), p.also.end(), k) == p.also.end(), component,
                  "program '" + text + "' names extra result %" + std::to_string(k) + " twice");
    p.also.push_back(static_cast<int>(k));
  }
  return p;
}

EwInstr ew_instr_for_node(const Node& n) {
  const std::string& name = n.op_name();
  const EwNodeInfo* row = ew_node_info(name);
  UPDRAFT_CHECK(row && row->op != EwOp::cast, name, "has no scalar elementwise form");
  EwInstr ins;
  ins.op = row->op;
  // The one string attribute that picks another program op: gelu's tanh form.
  if (row->op == EwOp::gelu && n.attr("approximate").s() == "tanh") ins.op = EwOp::gelu_tanh;
  int nin = static_cast<int>(n.inputs.size());
  for (int k = 0; k < nin; ++k) ins.args.push_back(EwOperand::in(k));
  for (int i = 0; i < row->attrs.size; ++i) {
    const EwAttr& a = row->attrs.at[i];
    if (a.kind == EwAttr::imm || a.kind == EwAttr::required_imm) ins.args.push_back(EwOperand::value(n.attr(a.name).f()));
  }
  UPDRAFT_CHECK(static_cast<int>(ins.args.size()) == ew_op_info(ins.op).arity, name,
                "takes " + std::to_string(ew_op_info(ins.op).arity) + " operands");
  return ins;
}

int ew_program_max_live(const EwProgram& p) {
  int n = static_cast<int>(p.instrs.size());
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < n; ++i)
    for (const EwOperand& a : p.instrs[i].args)
      if (a.kind == EwOperand::Kind::reg) last_use[a.index] = i;
  last_use[n - 1] = n;  // the result lives to the end
  int live = 0, peak = 0;
  for (int i = 0; i < n; ++i) {
    ++live;  // result i is written while its operands are still held
    peak = std::max(peak, live);
    for (int j = 0; j < i; ++j)
      if (last_use[j] == i) --live;
    if (last_use[i] < 0) --live;  // never read (dead result)
  }
  return peak;
}

}  // namespace updraft
