#include "runtime/bind_inputs.h"

#include <map>
#include <string>

#include "core/error.h"

namespace updraft {

namespace {

// True when d is exactly one symbol (s0), not an expression of it (s0*2).
bool is_bare_symbol(const Dim& d, std::string* name) {
  if (d.is_static()) return false;
  std::vector<std::string> syms;
  d.collect_symbols(syms);
  if (syms.size() != 1 || d.str() != syms[0]) return false;
  *name = syms[0];
  return true;
}

}  // namespace

SymBindings bind_input_shapes(const Graph& g, const std::vector<std::vector<int64_t>>& shapes,
                              const char* component) {
  const auto& ins = g.inputs();
  UPDRAFT_CHECK(shapes.size() == ins.size(), component,
                "expected " + std::to_string(ins.size()) + " input shapes, got " + std::to_string(shapes.size()));
  SymBindings b;
  std::map<std::string, size_t> bound_by;  // symbol -> input that bound it
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k]->binds.empty()) {  // a size input: its signature entry is {value}
      const std::string& name = ins[k]->binds;
      UPDRAFT_CHECK(shapes[k].size() == 1, component,
                    "input " + std::to_string(k) + " is a size input (binds " + name +
                        "); its entry in the input signature is {value}");
      auto it = b.find(name);
      if (it == b.end()) {
        b[name] = shapes[k][0];
        bound_by[name] = k;
      } else if (it->second != shapes[k][0]) {
        throw Error(component, "size input " + std::to_string(k) + " is " + std::to_string(shapes[k][0]) + " but " +
                                   name + " is already " + std::to_string(it->second) + " from input " +
                                   std::to_string(bound_by[name]));
      }
      continue;
    }
    const Shape& want = ins[k]->type.shape;
    const auto& got = shapes[k];
    UPDRAFT_CHECK(got.size() == want.size(), component,
                  "input " + std::to_string(k) + " has rank " + std::to_string(got.size()) + ", expected " +
                      std::to_string(want.size()) + " (" + ins[k]->type.str() + ")");
    for (size_t d = 0; d < got.size(); ++d) {
      UPDRAFT_CHECK(got[d] >= 0, component,
                    "input " + std::to_string(k) + " dim " + std::to_string(d) + " is negative (" +
                        std::to_string(got[d]) + ")");
      std::string name;
      if (!is_bare_symbol(want[d], &name)) continue;
      auto it = b.find(name);
      if (it == b.end()) {
        b[name] = got[d];
        bound_by[name] = k;
      } else if (it->second != got[d]) {
        throw Error(component, "input " + std::to_string(k) + " dim " + std::to_string(d) + " is " +
                                   std::to_string(got[d]) + " but " + name + " is already " +
                                   std::to_string(it->second) + " from input " + std::to_string(bound_by[name]));
      }
    }
  }
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k]->binds.empty()) continue;
    const Shape& want = ins[k]->type.shape;
    for (size_t d = 0; d < want.size(); ++d) {
      std::string name;
      if (is_bare_symbol(want[d], &name)) continue;
      std::vector<std::string> syms;
      want[d].collect_symbols(syms);
      for (const std::string& s : syms)
        UPDRAFT_CHECK(b.count(s), component,
                      "input " + std::to_string(k) + " dim " + std::to_string(d) + " is " + want[d].str() +
                          " but no input dim is plainly " + s + " and no size input binds it");
      int64_t expect = want[d].eval(b);
      UPDRAFT_CHECK(shapes[k][d] == expect, component,
                    "input " + std::to_string(k) + " dim " + std::to_string(d) + " is " +
                        std::to_string(shapes[k][d]) + ", expected " + std::to_string(expect) +
                        (want[d].is_static() ? "" : " (" + want[d].str() + ")"));
    }
  }
  return b;
}

}  // namespace updraft
