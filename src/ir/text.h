// Text IR: print a Graph as text and parse it back. Pass tests are written in it, and every
// pass can dump the graph in it (UPDRAFT_DEBUG=2).
//
//   graph(%x: f32[1, 3, s0, 64]) {
//     %w = constant f32[8, 3, 3, 3] random(seed=1)        // or full(0.5), or [1.0, 2.0, ...]
//     %b = constant f32[8] [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
//     %0 = conv2d(%x, %w) {padding=[1, 1]} : f32[1, 8, s0, 64]
//     %1, %2 = split(%0) {dim=1, sizes=[4, 4]}             // the ": types" part is optional
//     return (%1, %2)
//   }
//
//   std::unique_ptr<Graph> g = parse_graph(text);   // throws Error("parse", "line 3, col 12: ...")
//   std::string s = print_graph(*g);                // parse_graph(s) rebuilds the same graph
//
// Grammar (comments run from "//" to the end of a line, outside brackets):
//   graph  := 'graph' '(' [param {',' param}] ')' '{' {stmt} 'return' '(' [ref {',' ref}] ')' '}'
//   param  := ref ':' type ['=' symbol]                // `%n: i64[] = s1`: a size input, its value binds s1
//   stmt   := ref '=' 'constant' type data
//           | ref {',' ref} '=' op '(' [ref {',' ref}] ')' ['{' attr {',' attr} '}'] [':' type {',' type}]
//   type   := dtype '[' [dim {',' dim}] ']'             // f32[2, s0, (s0*2)]
//   dim    := integer | symbol | '(' expr ')' | max(expr, expr) | min(expr, expr)
//             (expr: + - * // % with the usual precedence)
//   data   := '[' {number | true | false} ']'         // row-major, exactly numel values
//           | random(seed=N [, lo=X] [, hi=X])        // uniform in [lo, hi), default [-1, 1)
//           | full(X)
//           | bits[0x3c00, ...]                       // f16/bf16: raw 16-bit patterns
//           | extern(REF)                             // supplied by the caller (ExternResolver)
//   attr   := name '=' value                          // value as Attr::str() prints it:
//             3  1.5  true  "tanh"  [1, 2]  f[0.5, 1.0]
//             [s0, (s1*12), 64]  s1  (s1*2)           // symbolic sizes (Attr Dims / Sym)
//
// Values print as %name when a node output / input / constant has a non-numeric name and as
// %0, %1, ... otherwise. The declared output types after ':' are checked against the op
// table's shape function, so a test that states a wrong shape fails at parse time.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace updraft {

struct PrintOptions {
  // Constants with at most this many elements print as literal data (so parsing the print
  // reproduces them bit for bit). Larger ones print as `elided(numel=.., fnv1a=0x..)`, which
  // is readable but cannot be parsed. -1: always print literal data.
  int64_t max_literal_numel = 64;
  // When set and it returns a non-empty reference for a constant, the constant prints as
  // `extern(REF)` instead of its data (the compile cache stores values apart from the text).
  std::function<std::string(const Value*)> constant_ref;
  // Append each node's provenance (Node::origin) as a comment: `... : f32[2, 16]  // from: addmm, gelu`.
  // A comment, so the text parses the same with or without it.
  bool origins = false;
};

// Resolves `extern(REF)` constant data when parsing: returns the tensor for REF, which must have
// exactly `type`. Throws Error to reject it.
using ExternResolver = std::function<Tensor(const std::string& ref, const TensorType& type)>;

std::string print_graph(const Graph& g, const PrintOptions& opts = {});
// Each node's line as print_graph writes it (same value names, no indent), in graph order.
std::vector<std::string> print_node_lines(const Graph& g, const PrintOptions& opts = {});

// What a parse may do beyond reading the text. Text IR can come from a file the process did not
// write (a cache entry), so what it can make the parser allocate is bounded: literal data needs
// a value in the text per element, and generated data (full, random) at most
// max_generated_bytes per constant.
struct ParseOptions {
  // Resolves `extern(REF)` data; without one, extern data is an error.
  const ExternResolver* externs = nullptr;
  // Bytes a full(...) or random(...) constant may allocate. 0: generated data is an error (a
  // cache entry holds every constant by reference). Large weights written in text IR by hand
  // or by a test fit under the default.
  size_t max_generated_bytes = size_t{1} << 30;
  // Operators plus parentheses in one dimension expression: the parser and Dim recurse over
  // them. Dynamo's sizes have a handful.
  int max_dim_expr_ops = 256;
};

// Throws Error("parse", "line L, col C: <what was expected> ...") on malformed text, and
// Error("parse", "line L, col C: <op>: <op table message>") when the op table rejects a node.
// `extern(REF)` data is accepted only when `externs` is given. Never allocates more than the
// options allow; sizes that overflow or are negative are errors.
std::unique_ptr<Graph> parse_graph(const std::string& text, const ParseOptions& opts);
std::unique_ptr<Graph> parse_graph(const std::string& text, const ExternResolver* externs = nullptr);

// One dimension in the type syntax: "64", "s0", "s0*12", "(s0*s1)//2", "max(s0, 1)". Used by
// the bindings to turn sizes written by the front end into Dims. Throws Error("parse", ...),
// also when constant arithmetic in it overflows int64.
Dim parse_dim(const std::string& text);

}  // namespace updraft
