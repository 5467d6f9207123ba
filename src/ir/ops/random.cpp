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
void infer_bernoulli(InferCtx& c) {
  const TensorType& seed = c.in(1);
  if (seed.dtype != DType::i64 || seed.shape.size() > 1 || (seed.shape.size() == 1 && !(seed.shape[0] == Dim(1))))
    c.fail("seed is " + seed.str() + "; expected one i64 value ([] or [1])");
  const double p = c.attr_float("p");
  if (!(p >= 0.0 && p <= 1.0)) c.fail("p = " + std::to_string(p) + " is not a probability in [0, 1]");
  if (c.attr_int("stream") < 0) c.fail("stream " + std::to_string(c.attr_int("stream")) + " must be >= 0");
  c.set_output(0, {DType::boolean, c.in(0).shape});
}

}  // namespace

void register_random_ops(OpTable& t) {
  using K = Attr::Kind;
  OpDef d;
  d.name = "bernoulli";
  d.min_inputs = d.max_inputs = 2;
  d.attrs = {{"p", K::Float, std::nullopt}, {"stream", K::Int, Attr(int64_t{0})}};
  d.cls = OpClass::Random;
  d.infer = infer_bernoulli;
  d.doc = "bool of input 0's shape (its data unread), true with probability p: Philox4x32-10 bits of "
          "(seed = input 1, stream, element index) below ceil(p * 2^32)";
  t.add(std::move(d));
}

}  // namespace updraft
