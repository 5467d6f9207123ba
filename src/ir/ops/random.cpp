// Random ops (docs/ops.md, "Random"): outputs drawn from the engine's counter-based generator
// (kernels/philox.h) under a seed the graph takes as an input. A random node is a pure function
// of its inputs and attributes (seed, stream, shape), so CSE and DCE treat it like any op; what
// makes two calls differ is the caller passing a new seed (python/updraft/random_ops.py).
#include "ir/op_table.h"

namespace updraft {
namespace {

// bernoulli(like, seed): bool of like's shape, each element true with probability p; like's
// data is not read. The seed is an i64 scalar ([] or [1]); `stream` tells apart the random
// nodes of one graph under one seed.
// Both ops: like's shape for the output, one i64 seed, a stream >= 0.
void check_draw(InferCtx& c) {
  const TensorType& seed = c.in(1);
  if (seed.dtype != DType::i64 || seed.shape.size() > 1 || (seed.shape.size() == 1 && !(seed.shape[0] == Dim(1))))
    c.fail("seed is " + seed.str() + "; expected one i64 value ([] or [1])");
  if (c.attr_int("stream") < 0) c.fail("stream " + std::to_string(c.attr_int("stream")) + " must be >= 0");
}

void infer_bernoulli(InferCtx& c) {
  check_draw(c);
  const double p = c.attr_float("p");
  if (!(p >= 0.0 && p <= 1.0)) c.fail("p = " + std::to_string(p) + " is not a probability in [0, 1]");
  c.set_output(0, {DType::boolean, c.in(0).shape});
}

// uniform(like, seed): f32 of like's shape in [0, 1); normal(like, seed): standard normal.
void infer_float_draw(InferCtx& c) {
  check_draw(c);
  c.set_output(0, {DType::f32, c.in(0).shape});
}

OpDef random_op(const char* name, std::vector<AttrSpec> attrs, void (*infer)(InferCtx&), const char* doc) {
  OpDef d;
  d.name = name;
  d.min_inputs = d.max_inputs = 2;
  d.attrs = std::move(attrs);
  d.attrs.push_back({"stream", Attr::Kind::Int, Attr(int64_t{0})});
  d.cls = OpClass::Random;
  d.infer = infer;
  d.doc = doc;
  return d;
}

}  // namespace

void register_random_ops(OpTable& t) {
  t.add(random_op("bernoulli", {{"p", Attr::Kind::Float, std::nullopt}}, infer_bernoulli,
                  "bool of input 0's shape (its data unread), true with probability p: Philox4x32-10 bits of "
                  "(seed = input 1, stream, element index) below ceil(p * 2^32)"));
  t.add(random_op("uniform", {}, infer_float_draw,
                  "f32 of input 0's shape (its data unread), uniform in [0, 1): the top 24 of the Philox4x32-10 "
                  "bits of (seed = input 1, stream, element index) times 2^-24"));
  t.add(random_op("normal", {}, infer_float_draw,
                  "f32 of input 0's shape (its data unread), standard normal: Box-Muller of two uniforms, "
                  "a = uniform of (seed = input 1, stream, element index) and b = the same with stream bit 63 "
                  "set, sqrt(-2 ln(1 - a)) cos(2 pi b) in double, rounded; |z| <= 5.77"));
}

}  // namespace updraft
