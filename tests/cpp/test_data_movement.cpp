// Data movement: shape functions (symbolic reshape and slice, clamping, broadcasting rules),
// reference kernels on hand-checked values, and the fast kernels vs the reference for several
// dtypes, strided inputs, empty and size-1 dims. Copies are bit-exact, so the tolerance is 0.
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// Data movement copies bits: every comparison is kExact (kernel_test_util.h).
constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max();  // what x[a:] lowers to

Attrs ints_attr(const std::string& name, std::vector<int64_t> v) { return {{name, Attr(std::move(v))}}; }
Attrs slice_attrs(int64_t dim, int64_t start, int64_t end, int64_t step = 1) {
  return {{"dim", Attr(dim)}, {"start", Attr(start)}, {"end", Attr(end)}, {"step", Attr(step)}};
}

void expect_exact(const std::string& op, const std::vector<TensorView>& in, const Attrs& a) {
  expect_matches_ref(op, inputs_of(in), a, kExact, kExact);
}

const std::vector<DType> kDtypes = {DType::f32, DType::i64, DType::boolean, DType::f64, DType::i32};

}  // namespace

TEST(DataMovementShape, SymbolicReshape) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 12, 64}};
  EXPECT_EQ(infer("reshape", {x}, ints_attr("shape", {-1, 768}))[0].shape, (Shape{s, 768}));
  Shape flat = infer("reshape", {x}, ints_attr("shape", {-1, 64}))[0].shape;
  EXPECT_EQ(flat[1], Dim(64));
  EXPECT_EQ(flat[0].eval({{"s0", 3}}), 36);
  EXPECT_EQ(flat[0], s * 12);  // cancelled, not a floordiv
  // A -1 that does not cancel stays exact as a floordiv of the numel.
  Shape odd = infer("reshape", {x}, ints_attr("shape", {-1, 5, 6}))[0].shape;
  EXPECT_EQ(odd[0].eval({{"s0", 5}}), 5 * 768 / 30);
  // Static cases and errors.
  EXPECT_EQ(infer("reshape", {{DType::f32, {2, 3, 4}}}, ints_attr("shape", {4, -1}))[0].shape, (Shape{4, 6}));
  EXPECT_EQ(infer("reshape", {{DType::f32, {0, 3}}}, ints_attr("shape", {3, 0}))[0].shape, (Shape{3, 0}));
  EXPECT_THROW(infer("reshape", {{DType::f32, {2, 3}}}, ints_attr("shape", {4, -1})), Error);   // 6 % 4
  EXPECT_THROW(infer("reshape", {{DType::f32, {2, 3}}}, ints_attr("shape", {-1, -1})), Error);  // two -1
  EXPECT_THROW(infer("reshape", {{DType::f32, {2, 3}}}, ints_attr("shape", {7})), Error);
  EXPECT_THROW(infer("reshape", {x}, ints_attr("shape", {12, 64})), Error);  // symbolic input needs -1
  EXPECT_THROW(infer("reshape", {{DType::f32, {0, 3}}}, ints_attr("shape", {0, -1})), Error);  // ambiguous
  const OpDef& def = OpTable::get().at("reshape");
  EXPECT_EQ(def.cls, OpClass::View);
  EXPECT_TRUE(def.alias);
}

TEST(DataMovementShape, SliceClampsLikeTorch) {
  TensorType x{DType::f32, {4, 10}};
  auto len = [&](int64_t start, int64_t end, int64_t step) {
    return infer("slice", {x}, slice_attrs(1, start, end, step))[0].shape[1].value();
  };
  EXPECT_EQ(len(2, 5, 1), 3);
  EXPECT_EQ(len(-3, kToEnd, 1), 3);
  EXPECT_EQ(len(0, 100, 3), 4);    // 0 3 6 9
  EXPECT_EQ(len(-100, 2, 1), 2);   // start clamps to 0
  EXPECT_EQ(len(7, 3, 1), 0);      // empty
  EXPECT_EQ(len(1, -1, 2), 4);     // 1 3 5 7
  EXPECT_THROW(len(0, 5, 0), Error);
  Dim s = Dim::sym("s0");
  TensorType sx{DType::f32, {s, 8}};
  EXPECT_EQ(infer("slice", {sx}, slice_attrs(0, 0, kToEnd))[0].shape[0], s);
  Dim tail = infer("slice", {sx}, slice_attrs(0, 1, kToEnd, 2))[0].shape[0];
  EXPECT_EQ(tail.eval({{"s0", 7}}), 3);  // 1 3 5
  EXPECT_EQ(tail.eval({{"s0", 0}}), 0);
  Dim last3 = infer("slice", {sx}, slice_attrs(0, -3, kToEnd))[0].shape[0];
  EXPECT_EQ(last3.eval({{"s0", 10}}), 3);
  EXPECT_EQ(last3.eval({{"s0", 2}}), 2);
}

TEST(DataMovementShape, OtherOps) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 3, 4}};
  EXPECT_EQ(infer("permute", {x}, ints_attr("dims", {2, 0, 1}))[0].shape, (Shape{4, s, 3}));
  EXPECT_THROW(infer("permute", {x}, ints_attr("dims", {0, 0, 1})), Error);
  EXPECT_THROW(infer("permute", {x}, ints_attr("dims", {0, 1})), Error);
  EXPECT_EQ(infer("concat", {x, x, {DType::f32, {s, 5, 4}}}, {{"dim", Attr(-2)}})[0].shape, (Shape{s, 11, 4}));
  EXPECT_EQ(infer("concat", {x, x}, {{"dim", Attr(0)}})[0].shape, (Shape{s + s, 3, 4}));
  EXPECT_THROW(infer("concat", {x, {DType::f32, {s, 3, 5}}}, {{"dim", Attr(1)}}), Error);
  EXPECT_THROW(infer("concat", {x, {DType::i64, {s, 3, 4}}}, {{"dim", Attr(1)}}), Error);
  EXPECT_EQ(infer("expand", {{DType::f32, {s, 1, 4}}}, ints_attr("shape", {2, -1, 5, -1}))[0].shape, (Shape{2, s, 5, 4}));
  EXPECT_THROW(infer("expand", {{DType::f32, {3, 4}}}, ints_attr("shape", {3, 5})), Error);
  EXPECT_THROW(infer("expand", {{DType::f32, {s}}}, ints_attr("shape", {6})), Error);
  TensorType w{DType::f32, {100, 16}}, ids{DType::i64, {s, 7}};
  EXPECT_EQ(infer("embedding", {w, ids}, {})[0].shape, (Shape{s, 7, 16}));
  EXPECT_THROW(infer("embedding", {w, {DType::f32, {3}}}, {}), Error);
  EXPECT_EQ(infer("index_select", {x, {DType::i64, {5}}}, {{"dim", Attr(1)}})[0].shape, (Shape{s, 5, 4}));
  EXPECT_EQ(infer("gather", {x, {DType::i64, {s, 3, 9}}}, {{"dim", Attr(2)}})[0].shape, (Shape{s, 3, 9}));
  EXPECT_THROW(infer("gather", {x, {DType::i64, {s, 4, 9}}}, {{"dim", Attr(2)}}), Error);
  EXPECT_EQ(infer("pad", {x}, ints_attr("pads", {1, 2, -1, 0}))[0].shape, (Shape{s, 2, 7}));
  EXPECT_THROW(infer("pad", {x}, ints_attr("pads", {1})), Error);
  EXPECT_THROW(infer("pad", {x}, ints_attr("pads", {-3, -2})), Error);
  auto parts = infer("split", {x}, {{"dim", Attr(2)}, {"sizes", Attr(std::vector<int64_t>{1, 3})}});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].shape, (Shape{s, 3, 3}));
  EXPECT_THROW(infer("split", {x}, {{"dim", Attr(2)}, {"sizes", Attr(std::vector<int64_t>{1, 2})}}), Error);
  EXPECT_LT(OpTable::get().at("split").num_outputs, 0);
}

TEST(DataMovementRef, HandCheckedValues) {
  Tensor x = from_values(DType::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  auto run = [&](const std::string& op, std::vector<TensorView> in, Attrs a) {
    OneNode n(op, inputs_of(in), std::move(a));
    return values_of(run_node(*n.node, in, Device::ref)[0]);
  };
  EXPECT_EQ(run("permute", {x.view()}, ints_attr("dims", {1, 0})), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(run("slice", {x.view()}, slice_attrs(1, -2, kToEnd)), (std::vector<double>{1, 2, 4, 5}));
  EXPECT_EQ(run("concat", {x.view(), x.view()}, {{"dim", Attr(1)}}),
            (std::vector<double>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  Tensor col = from_values(DType::f32, {2, 1}, {7, 8});
  EXPECT_EQ(run("expand", {col.view()}, ints_attr("shape", {2, 3})), (std::vector<double>{7, 7, 7, 8, 8, 8}));
  EXPECT_EQ(run("pad", {x.view()}, {{"pads", Attr(std::vector<int64_t>{1, -1})}, {"value", Attr(9.0)}}),
            (std::vector<double>{9, 0, 1, 9, 3, 4}));
  Tensor ids = from_values(DType::i64, {2}, {1, 1});
  EXPECT_EQ(run("index_select", {x.view(), ids.view()}, {{"dim", Attr(0)}}), (std::vector<double>{3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(run("embedding", {x.view(), ids.view()}, {}), (std::vector<double>{3, 4, 5, 3, 4, 5}));
  Tensor gi = from_values(DType::i64, {2, 2}, {2, 0, 1, 1});
  EXPECT_EQ(run("gather", {x.view(), gi.view()}, {{"dim", Attr(1)}}), (std::vector<double>{2, 0, 4, 4}));
}

TEST(DataMovementCpu, CopyReshapePermuteEveryDtype) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {3, 5, 7}, 1, -100, 100);
    auto [v, store] = transposed_copy(x);
    for (const TensorView& in : {x.view(), v}) {
      expect_exact("copy", {in}, {});
      expect_exact("reshape", {in}, ints_attr("shape", {-1, 7}));
      expect_exact("reshape", {in}, ints_attr("shape", {105}));
      for (auto dims : std::vector<std::vector<int64_t>>{{0, 2, 1}, {2, 1, 0}, {1, 0, 2}, {-1, 0, 1}, {0, 1, 2}})
        expect_exact("permute", {in}, ints_attr("dims", dims));
    }
  }
  // Blocked-transpose path: big enough planes, odd sizes so tiles have ragged edges.
  Tensor big = random_tensor(DType::f32, {3, 67, 129}, 2);
  expect_exact("permute", {big.view()}, ints_attr("dims", {0, 2, 1}));
  Tensor huge = random_tensor(DType::f32, {2, 512, 300}, 3);  // parallel tiles
  expect_exact("permute", {huge.view()}, ints_attr("dims", {2, 0, 1}));
  Tensor e(DType::f32, {0, 4});
  expect_exact("permute", {e.view()}, ints_attr("dims", {1, 0}));
  Tensor one(DType::f32, {1, 1});
  expect_exact("permute", {one.view()}, ints_attr("dims", {1, 0}));
}

TEST(DataMovementCpu, SliceConcatSplit) {
  for (DType dt : {DType::f32, DType::i64, DType::boolean}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {4, 9, 11}, 4);
    auto [v, store] = transposed_copy(x);
    for (const TensorView& in : {x.view(), v}) {
      expect_exact("slice", {in}, slice_attrs(2, 1, 8, 3));
      expect_exact("slice", {in}, slice_attrs(-2, -4, kToEnd));
      expect_exact("slice", {in}, slice_attrs(0, 5, 9));  // empty after clamping
      expect_exact("slice", {in}, slice_attrs(1, -100, 100, 2));
      expect_exact("concat", {in, x.view(), in}, {{"dim", Attr(-1)}});
      expect_exact("concat", {in, x.view()}, {{"dim", Attr(0)}});
      expect_exact("split", {in}, {{"dim", Attr(1)}, {"sizes", Attr(std::vector<int64_t>{2, 0, 7})}});
      expect_exact("split", {in}, {{"dim", Attr(-1)}, {"sizes", Attr(std::vector<int64_t>{11})}});
    }
    Tensor empty(dt, {4, 0, 11});
    expect_exact("concat", {x.view(), empty.view()}, {{"dim", Attr(1)}});
  }
}

TEST(DataMovementCpu, ExpandAndPad) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {3, 1, 5}, 5, -9, 9);
    expect_exact("expand", {x.view()}, ints_attr("shape", {2, 3, 4, 5}));
    expect_exact("expand", {x.view()}, ints_attr("shape", {-1, 0, -1}));
    Tensor s(dt, {1});
    expect_exact("expand", {s.view()}, ints_attr("shape", {6, 7}));
    auto [v, store] = transposed_copy(random_tensor(dt, {4, 1}, 6, -9, 9));
    expect_exact("expand", {v}, ints_attr("shape", {4, 33}));
    expect_exact("pad", {x.view()}, {{"pads", Attr(std::vector<int64_t>{2, 1, 0, 3})}, {"value", Attr(1.0)}});
    expect_exact("pad", {x.view()}, {{"pads", Attr(std::vector<int64_t>{-1, -2, 1, 1, 1, 0})}});
    expect_exact("pad", {x.view()}, {{"pads", Attr(std::vector<int64_t>{-5, 2})}});  // input cropped away
  }
  Tensor img = random_tensor(DType::f32, {2, 3, 17, 19}, 7);
  auto [v, store] = transposed_copy(img);
  expect_exact("pad", {v}, {{"pads", Attr(std::vector<int64_t>{1, 1, 1, 1})}, {"value", Attr(-0.5)}});
}

TEST(DataMovementCpu, EmbeddingIndexSelectGather) {
  Tensor w = random_tensor(DType::f32, {50, 24}, 1);
  Tensor ids = random_tensor(DType::i64, {3, 7}, 2, 0, 50);
  Tensor ids32 = random_tensor(DType::i32, {5}, 3, 0, 50);
  expect_exact("embedding", {w.view(), ids.view()}, {});
  expect_exact("embedding", {w.view(), ids32.view()}, {});
  Tensor none(DType::i64, {0});
  expect_exact("embedding", {w.view(), none.view()}, {});
  auto [wt, wstore] = transposed_copy(w);  // strided weight rows
  expect_exact("embedding", {wt, ids.view()}, {});
  Tensor many = random_tensor(DType::i64, {4096}, 4, 0, 50);  // parallel row copies
  Tensor wide = random_tensor(DType::f32, {50, 256}, 5);
  expect_exact("embedding", {wide.view(), many.view()}, {});
  expect_exact("index_select", {wide.view(), many.view()}, {{"dim", Attr(0)}});  // parallel blocks

  Tensor x = random_tensor(DType::f32, {6, 5, 4}, 6);
  auto [xv, xstore] = transposed_copy(x);
  for (int dim = 0; dim < 3; ++dim) {
    Tensor idx = random_tensor(DType::i64, {9}, 7 + dim, 0, static_cast<double>(x.shape()[dim]));
    expect_exact("index_select", {x.view(), idx.view()}, {{"dim", Attr(dim)}});
    expect_exact("index_select", {xv, idx.view()}, {{"dim", Attr(dim - 3)}});
    std::vector<int64_t> gshape = {4, 3, 2};
    gshape[dim] = 7;  // the gathered dim may be longer than x's
    Tensor gidx = random_tensor(DType::i64, gshape, 10 + dim, 0, static_cast<double>(x.shape()[dim]));
    expect_exact("gather", {x.view(), gidx.view()}, {{"dim", Attr(dim)}});
    expect_exact("gather", {xv, gidx.view()}, {{"dim", Attr(dim)}});
  }
  Tensor bx = random_tensor(DType::boolean, {5, 3}, 8);
  Tensor bi = random_tensor(DType::i64, {2}, 9, 0, 5);
  expect_exact("index_select", {bx.view(), bi.view()}, {{"dim", Attr(0)}});
}

TEST(DataMovementCpu, OutOfRangeIndicesThrowAndNeverRead) {
  Tensor w = random_tensor(DType::f32, {10, 4}, 1);
  for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Tensor ids = from_values(DType::i64, {3}, {0, 3, 0});
    ids.ptr<int64_t>()[1] = bad;
    OneNode n("embedding", {w.view(), ids.view()});
    for (Device d : {Device::cpu, Device::ref}) {
      try {
        run_node(*n.node, {w.view(), ids.view()}, d);
        FAIL() << "index " << bad << " must throw on " << device_name(d);
      } catch (const Error& e) {
        EXPECT_EQ(e.component(), "embedding");
        EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos);
      }
    }
  }
  Tensor x = random_tensor(DType::f32, {3, 4}, 2);
  Tensor gi = from_values(DType::i64, {1, 1}, {4});
  OneNode g("gather", {x.view(), gi.view()}, {{"dim", Attr(1)}});
  EXPECT_THROW(run_node(*g.node, {x.view(), gi.view()}, Device::cpu), Error);
  Tensor si = from_values(DType::i64, {1}, {3});
  OneNode s("index_select", {x.view(), si.view()}, {{"dim", Attr(0)}});
  EXPECT_THROW(run_node(*s.node, {x.view(), si.view()}, Device::cpu), Error);
}
