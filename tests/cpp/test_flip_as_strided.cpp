// flip and as_strided: shape functions (dims, bounds of the strided view), reference kernels on
// hand-checked values, and the fast kernels vs the reference over every dtype, strided inputs,
// odd shapes and sizes 0 and 1. Copies are bit-exact, so the tolerance is 0.
#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::i64, DType::boolean, DType::f64, DType::i32};

Attrs flip_attrs(std::vector<int64_t> dims) { return {{"dims", Attr(std::move(dims))}}; }
Attrs strided_attrs(std::vector<int64_t> size, std::vector<int64_t> stride, int64_t offset) {
  return {{"size", Attr(std::move(size))}, {"stride", Attr(std::move(stride))}, {"offset", Attr(offset)}};
}

std::vector<double> run_ref(const std::string& op, const Tensor& x, Attrs a) {
  OneNode n(op, {x.view()}, std::move(a));
  return values_of(run_node(*n.node, {x.view()}, Device::ref)[0]);
}

}  // namespace

TEST(TensorView, EmptyTensorsAreContiguousWhateverTheirStrides) {
  Tensor e(DType::f32, {5, 0, 10});
  TensorView v = e.view();
  v.strides[0] = 10;  // torch's strides for an empty [5, 0, 10]
  v.strides[1] = 10;
  EXPECT_TRUE(v.is_contiguous());
  Tensor x(DType::f32, {3, 4});
  TensorView t = x.view();
  std::swap(t.sizes[0], t.sizes[1]);
  EXPECT_FALSE(t.is_contiguous());
}

TEST(FlipShape, DimsAreCheckedAndShapeKept) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 3, 4}};
  EXPECT_EQ(infer("flip", {x}, flip_attrs({0, -1}))[0].shape, (Shape{s, 3, 4}));
  EXPECT_EQ(infer("flip", {x}, flip_attrs({}))[0].shape, (Shape{s, 3, 4}));
  EXPECT_THROW(infer("flip", {x}, flip_attrs({1, -2})), Error);  // the same dim twice
  EXPECT_THROW(infer("flip", {x}, flip_attrs({3})), Error);
  EXPECT_EQ(infer("flip", {{DType::f32, {}}}, flip_attrs({0}))[0].shape, Shape{});  // 0-d: dim 0 allowed
}

TEST(AsStridedShape, ViewMustStayInsideTheInput) {
  TensorType x{DType::f32, {3, 3}};
  EXPECT_EQ(infer("as_strided", {x}, strided_attrs({2, 2}, {1, 2}, 0))[0].shape, (Shape{2, 2}));
  EXPECT_EQ(infer("as_strided", {x}, strided_attrs({2, 2}, {3, 1}, 4))[0].shape, (Shape{2, 2}));  // reaches 8
  EXPECT_THROW(infer("as_strided", {x}, strided_attrs({2, 2}, {3, 1}, 5)), Error);                // reaches 9
  EXPECT_EQ(infer("as_strided", {x}, strided_attrs({0, 7}, {100, 100}, 0))[0].shape, (Shape{0, 7}));  // empty
  EXPECT_THROW(infer("as_strided", {x}, strided_attrs({2}, {1, 1}, 0)), Error);   // lengths differ
  EXPECT_THROW(infer("as_strided", {x}, strided_attrs({2}, {-1}, 2)), Error);     // negative stride
  EXPECT_THROW(infer("as_strided", {x}, strided_attrs({2}, {1}, -1)), Error);     // negative offset
  EXPECT_THROW(infer("as_strided", {{DType::f32, {Dim::sym("s0"), 3}}}, strided_attrs({2}, {1}, 0)), Error);
  EXPECT_EQ(infer("as_strided", {{DType::i64, {}}}, strided_attrs({}, {}, 0))[0].shape, Shape{});
}

TEST(FlipAsStridedRef, HandCheckedValues) {
  Tensor x = from_values(DType::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(run_ref("flip", x, flip_attrs({1})), (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(run_ref("flip", x, flip_attrs({0, 1})), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(run_ref("flip", x, flip_attrs({})), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  // Overlapping windows (stride 1 < size) and a broadcast (stride 0).
  EXPECT_EQ(run_ref("as_strided", x, strided_attrs({3, 2}, {1, 1}, 1)), (std::vector<double>{1, 2, 2, 3, 3, 4}));
  EXPECT_EQ(run_ref("as_strided", x, strided_attrs({2, 2}, {0, 2}, 1)), (std::vector<double>{1, 3, 1, 3}));
  // The diagonal of a [3, 3] matrix: stride 3 + 1.
  Tensor m = from_values(DType::i64, {3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(run_ref("as_strided", m, strided_attrs({3}, {4}, 0)), (std::vector<double>{0, 4, 8}));
  // A strided input (x's values, column-major memory 0 3 1 4 2 5) is read in its logical
  // row-major order: positions 0, 2, 4 are 0, 2, 4 (memory order would give 0, 1, 2).
  auto [t, store] = transposed_copy(x);
  ASSERT_FALSE(t.is_contiguous());
  OneNode n("as_strided", {t}, strided_attrs({3}, {2}, 0));
  EXPECT_EQ(values_of(run_node(*n.node, {t}, Device::ref)[0]), (std::vector<double>{0, 2, 4}));
}

TEST(FlipAsStridedCpu, MatchRefEveryDtypeStridedAndEmpty) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {3, 5, 7}, 1, -100, 100);
    auto [v, store] = transposed_copy(x);
    for (const TensorView& in : {x.view(), v}) {
      for (auto dims : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {-1, 0, 1}, {}})
        expect_matches_ref("flip", {in}, flip_attrs(dims), kExact, kExact);
      expect_matches_ref("as_strided", {in}, strided_attrs({4, 3}, {7, 2}, 5), kExact, kExact);
      expect_matches_ref("as_strided", {in}, strided_attrs({2, 3, 2}, {0, 33, 1}, 3), kExact, kExact);
      expect_matches_ref("as_strided", {in}, strided_attrs({105}, {1}, 0), kExact, kExact);
      expect_matches_ref("as_strided", {in}, strided_attrs({}, {}, 104), kExact, kExact);
    }
  }
  // Sizes 0 and 1, a 0-d input, and one big enough for the parallel copy.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{0, 4}, {1, 1}, {4, 0, 3}, {}}) {
    Tensor e = random_tensor(DType::f32, shape, 2);
    expect_matches_ref("flip", {e.view()}, flip_attrs(shape.empty() ? std::vector<int64_t>{0}
                                                                      : std::vector<int64_t>{0, -1}),
                           kExact, kExact);
  }
  Tensor one = random_tensor(DType::f32, {1}, 3);
  expect_matches_ref("as_strided", {one.view()}, strided_attrs({1, 1}, {1, 1}, 0), kExact, kExact);
  expect_matches_ref("as_strided", {one.view()}, strided_attrs({0, 3}, {1, 1}, 0), kExact, kExact);
  Tensor big = random_tensor(DType::f32, {64, 129, 37}, 4);
  expect_matches_ref("flip", {big.view()}, flip_attrs({1, 2}), kExact, kExact);
  expect_matches_ref("as_strided", {big.view()}, strided_attrs({129, 64}, {37, 129 * 37}, 11), kExact, kExact);
}
