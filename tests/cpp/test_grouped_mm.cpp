// grouped_mm: the shape function, the reference on a hand-checked case (groups, an empty group,
// rows past the last offset left 0, a transposed weight) and the oneDNN sgemm kernel vs the
// reference over group layouts, including offsets that go past S, backwards or negative
// (Python slice rules, as transformers' fallback loop).
#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {
Attrs gattrs(bool tw) { return {{"transposed_w", Attr(tw)}}; }
}  // namespace

TEST(GroupedMmShape, RowsByN) {
  Dim s = Dim::sym("s0");
  auto out = infer("grouped_mm", {{DType::f32, {s, 4}}, {DType::f32, {3, 4, 5}}, {DType::i32, {3}}}, gattrs(false));
  EXPECT_EQ(out[0].shape, (Shape{s, 5}));
  auto t = infer("grouped_mm", {{DType::f32, {7, 4}}, {DType::f32, {3, 5, 4}}, {DType::i64, {3}}}, gattrs(true));
  EXPECT_EQ(t[0].shape, (Shape{7, 5}));
  EXPECT_THROW(infer("grouped_mm", {{DType::f32, {7, 4}}, {DType::f32, {3, 4, 5}}, {DType::i32, {2}}}, gattrs(false)),
               Error);
  EXPECT_THROW(infer("grouped_mm", {{DType::f32, {7, 3}}, {DType::f32, {3, 4, 5}}, {DType::i32, {3}}}, gattrs(false)),
               Error);
  EXPECT_THROW(infer("grouped_mm", {{DType::f32, {7, 4}}, {DType::f32, {3, 4, 5}}, {DType::f32, {3}}}, gattrs(false)),
               Error);
}

TEST(GroupedMmRef, GroupsEmptyGroupAndTail) {
  // x rows 0..4 = [r, 1]; w[0] = [[1], [0]] (takes column 0), w[1] skipped, w[2] = [[0], [1]].
  Tensor x = from_values(DType::f32, {5, 2}, {10, 1, 20, 1, 30, 1, 40, 1, 50, 1});
  Tensor w = from_values(DType::f32, {3, 2, 1}, {1, 0, 9, 9, 0, 1});
  Tensor offs = from_values(DType::i32, {3}, {2, 2, 4});
  OneNode n("grouped_mm", {x.view(), w.view(), offs.view()}, gattrs(false));
  auto r = run_node(*n.node, {x.view(), w.view(), offs.view()}, Device::ref);
  EXPECT_EQ(values_of(r[0]), (std::vector<double>{10, 20, 1, 1, 0}));
  Tensor wt = from_values(DType::f32, {3, 1, 2}, {1, 0, 9, 9, 0, 1});  // the same, stored [E, N, K]
  OneNode t("grouped_mm", {x.view(), wt.view(), offs.view()}, gattrs(true));
  auto rt = run_node(*t.node, {x.view(), wt.view(), offs.view()}, Device::ref);
  EXPECT_EQ(values_of(rt[0]), (std::vector<double>{10, 20, 1, 1, 0}));
}

TEST(GroupedMmCpu, MatchesRef) {
  const int64_t S = 37, K = 24, N = 40, E = 5;
  Tensor x = random_tensor(DType::f32, {S, K}, 1);
  Tensor w = random_tensor(DType::f32, {E, K, N}, 2);
  Tensor wt = random_tensor(DType::f32, {E, N, K}, 3);
  std::vector<std::vector<double>> layouts = {
      {5, 12, 12, 30, 37}, {0, 0, 0, 0, 37}, {37, 37, 37, 37, 37}, {3, 9, 20, 25, 30},  // tail rows stay 0
      {10, 50, 60, 60, 60},                                                             // past S: clamped
      {20, 10, 30, 25, 37},                                                             // backwards
      {-5, 4, -30, 8, 37}};                                                             // negative: from S
  for (const auto& l : layouts)
    for (DType odt : {DType::i32, DType::i64}) {
      Tensor offs = from_values(odt, {E}, l);
      for (bool tw : {false, true}) {
        const Tensor& wv = tw ? wt : w;
        OneNode n("grouped_mm", {x.view(), wv.view(), offs.view()}, gattrs(tw));
        EXPECT_EQ(n.kernel_name(Device::cpu), "onednn_grouped_mm");
        expect_matches_ref("grouped_mm", {x.view(), wv.view(), offs.view()}, gattrs(tw), 1e-5, 1e-5);
      }
    }
  Tensor empty = random_tensor(DType::f32, {0, K}, 4);
  Tensor offs0 = from_values(DType::i32, {E}, {0, 0, 0, 0, 0});
  expect_matches_ref("grouped_mm", {empty.view(), w.view(), offs0.view()}, gattrs(false), 0, 0, Fast::may_fall_back);
}
