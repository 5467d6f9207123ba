// sort: shape function, the reference on hand-checked values (ties stay in input order, NaN
// above every number, descending), and the CPU kernel vs the reference over every dtype it
// declares, every dim, strided inputs, odd shapes, sizes 0 and 1 and a 0-d input. Exact.
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Attrs sort_attrs(int64_t dim, bool descending) { return {{"dim", Attr(dim)}, {"descending", Attr(descending)}}; }

std::pair<std::vector<double>, std::vector<double>> run_ref(const Tensor& x, int64_t dim, bool descending) {
  OneNode n("sort", {x.view()}, sort_attrs(dim, descending));
  auto r = run_node(*n.node, {x.view()}, Device::ref);
  return {values_of(r[0]), values_of(r[1])};
}

}  // namespace

TEST(SortShape, ValuesAndI64Indices) {
  Dim s = Dim::sym("s0");
  auto out = infer("sort", {{DType::f32, {s, 5}}}, sort_attrs(-1, false));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dtype, DType::f32);
  EXPECT_EQ(out[1].dtype, DType::i64);
  EXPECT_EQ(out[1].shape, (Shape{s, 5}));
  EXPECT_THROW(infer("sort", {{DType::f32, {3}}}, sort_attrs(1, false)), Error);
  EXPECT_THROW(infer("sort", {{DType::boolean, {3}}}, sort_attrs(0, false)), Error);
  EXPECT_EQ(infer("sort", {{DType::i64, {}}}, sort_attrs(0, true))[0].shape, Shape{});
}

TEST(SortRef, TiesNanAndDirection) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_values(DType::f32, {6}, {2, nan, 1, 2, -1, 1});
  auto [v, i] = run_ref(x, 0, false);
  EXPECT_EQ(i, (std::vector<double>{4, 2, 5, 0, 3, 1}));  // equal values keep input order; NaN last
  EXPECT_EQ(std::vector<double>(v.begin(), v.begin() + 5), (std::vector<double>{-1, 1, 1, 2, 2}));
  EXPECT_TRUE(std::isnan(v[5]));
  auto [vd, id] = run_ref(x, 0, true);
  EXPECT_EQ(id, (std::vector<double>{1, 0, 3, 2, 5, 4}));  // NaN first; ties still in input order
  // Along dim 0 of a [2, 3]: columns sort independently.
  Tensor m = from_values(DType::i64, {2, 3}, {5, 0, 7, 3, 4, 7});
  auto [vm, im] = run_ref(m, 0, false);
  EXPECT_EQ(vm, (std::vector<double>{3, 0, 7, 5, 4, 7}));
  EXPECT_EQ(im, (std::vector<double>{1, 0, 0, 0, 1, 1}));
}

TEST(SortCpu, MatchesRefEveryDtypeDimAndLayout) {
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {3, 7, 5}, 1, -4, 4);  // small range: many ties
    auto [t, store] = transposed_copy(x);
    for (const TensorView& in : {x.view(), t})
      for (int64_t dim : {0, 1, 2, -1})
        for (bool desc : {false, true}) expect_matches_ref("sort", {in}, sort_attrs(dim, desc), 0, 0);
  }
  Tensor f = random_tensor(DType::f32, {4, 33}, 2);
  for (int64_t k : {0, 5, 17, 32}) f.ptr<float>()[k * 3] = std::numeric_limits<float>::quiet_NaN();
  f.ptr<float>()[7] = -0.0f;
  f.ptr<float>()[8] = std::numeric_limits<float>::infinity();
  for (bool desc : {false, true}) expect_matches_ref("sort", {f.view()}, sort_attrs(1, desc), 0, 0);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{0, 4}, {4, 0}, {1, 1}, {1}, {}}) {
    Tensor e = random_tensor(DType::f32, shape, 3);
    expect_matches_ref("sort", {e.view()}, sort_attrs(shape.empty() ? 0 : -1, true), 0, 0);
  }
  Tensor big = random_tensor(DType::f32, {257, 129}, 4);  // parallel rows
  expect_matches_ref("sort", {big.view()}, sort_attrs(0, false), 0, 0);
  expect_matches_ref("sort", {big.view()}, sort_attrs(1, true), 0, 0);
}

// topk: the shape function, the reference on a hand-checked case and the CPU kernel vs the
// reference. Which of several equal values topk returns is pinned against eager PyTorch by
// tests/python/test_ops_missing.py (test_topk_ties_*).
namespace {
Attrs topk_attrs(int64_t dim, int64_t k, bool largest, bool sorted) {
  return {{"dim", Attr(dim)}, {"k", Attr(k)}, {"largest", Attr(largest)}, {"sorted", Attr(sorted)}};
}
}  // namespace

TEST(TopkShape, KAlongDim) {
  auto out = infer("topk", {{DType::f32, {3, 9, 2}}}, topk_attrs(1, 4, true, true));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape, (Shape{3, 4, 2}));
  EXPECT_EQ(out[1].dtype, DType::i64);
  EXPECT_THROW(infer("topk", {{DType::f32, {3}}}, topk_attrs(0, 4, true, true)), Error);
  EXPECT_THROW(infer("topk", {{DType::f32, {3}}}, topk_attrs(0, -1, true, true)), Error);
  EXPECT_THROW(infer("topk", {{DType::f32, {Dim::sym("s0")}}}, topk_attrs(0, 1, true, true)), Error);
  EXPECT_EQ(infer("topk", {{DType::i64, {}}}, topk_attrs(0, 1, true, true))[0].shape, Shape{});
}

TEST(TopkRef, LargestWithNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_values(DType::f32, {5}, {1, 4, nan, -2, 3});
  OneNode n("topk", {x.view()}, topk_attrs(0, 3, true, true));
  auto r = run_node(*n.node, {x.view()}, Device::ref);
  EXPECT_EQ(values_of(r[1]), (std::vector<double>{2, 1, 4}));  // NaN counts as the largest
  OneNode s("topk", {x.view()}, topk_attrs(0, 2, false, true));
  auto rs = run_node(*s.node, {x.view()}, Device::ref);
  EXPECT_EQ(values_of(rs[0]), (std::vector<double>{-2, 1}));
}

TEST(TopkCpu, MatchesRefEveryDtypeDimKAndLayout) {
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {3, 7, 5}, 1, -2, 2);  // heavy ties
    auto [t, store] = transposed_copy(x);
    for (const TensorView& in : {x.view(), t})
      for (int64_t dim : {0, 1, 2, -1}) {
        int64_t n = in.shape()[dim < 0 ? dim + 3 : dim];
        for (int64_t k = 0; k <= n; ++k)
          for (bool largest : {false, true})
            for (bool sorted : {false, true})
              expect_matches_ref("topk", {in}, topk_attrs(dim, k, largest, sorted), 0, 0);
      }
  }
  Tensor wide = random_tensor(DType::f32, {6, 300}, 5, -3, 3);  // k * 64 <= n: the partial-sort branch
  for (int64_t k : {1, 2, 4, 5, 100, 300})
    for (bool largest : {false, true}) expect_matches_ref("topk", {wide.view()}, topk_attrs(1, k, largest, true), 0, 0);
  Tensor big = random_tensor(DType::f32, {257, 129}, 4, -3, 3);  // parallel rows
  expect_matches_ref("topk", {big.view()}, topk_attrs(1, 2, true, true), 0, 0);
  expect_matches_ref("topk", {big.view()}, topk_attrs(0, 9, false, true), 0, 0);
}
