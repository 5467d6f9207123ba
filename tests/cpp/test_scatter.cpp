// scatter (torch.scatter / scatter_add): shape function, reference kernel on hand-checked
// values, and the CPU kernel vs the reference over dtypes, every dim, strided inputs, index
// smaller than src and x, duplicate indices, empty and size-1 dims. Both kernels walk the index
// in row-major order, so even float sums with duplicates agree bit for bit.
#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Attrs scatter_attrs(int64_t dim, const std::string& reduce = "none") {
  return {{"dim", Attr(dim)}, {"reduce", Attr(reduce)}};
}

void expect_exact(const std::vector<TensorView>& in, const Attrs& a) {
  expect_matches_ref("scatter", inputs_of(in), a, 0.0, 0.0);
}

}  // namespace

TEST(ScatterShape, ChecksRanksSizesDtypesAndReduce) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 5, 4}};
  TensorType idx{DType::i64, {2, 7, 4}};
  TensorType src{DType::f32, {3, 7, 4}};
  EXPECT_EQ(infer("scatter", {x, idx, src}, scatter_attrs(1))[0].shape, (Shape{s, 5, 4}));
  EXPECT_EQ(infer("scatter", {x, idx, src}, scatter_attrs(-2, "add"))[0].dtype, DType::f32);
  EXPECT_THROW(infer("scatter", {x, idx, src}, scatter_attrs(2)), Error);  // 7 > 5 off dim
  EXPECT_THROW(infer("scatter", {x, {DType::i64, {4, 7, 4}}, src}, scatter_attrs(1)), Error);  // > src
  EXPECT_THROW(infer("scatter", {x, {DType::i32, {2, 7, 4}}, src}, scatter_attrs(1)), Error);
  EXPECT_THROW(infer("scatter", {x, {DType::i64, {2, 7}}, src}, scatter_attrs(1)), Error);
  EXPECT_THROW(infer("scatter", {x, idx, {DType::f64, {3, 7, 4}}}, scatter_attrs(1)), Error);
  EXPECT_THROW(infer("scatter", {x, idx, src}, scatter_attrs(1, "max")), Error);
  TensorType b{DType::boolean, {3, 4}};
  TensorType bi{DType::i64, {3, 4}};
  EXPECT_EQ(infer("scatter", {b, bi, b}, scatter_attrs(0))[0].dtype, DType::boolean);
  EXPECT_THROW(infer("scatter", {b, bi, b}, scatter_attrs(0, "add")), Error);
  EXPECT_THROW(infer("scatter", {{DType::f32, {}}, {DType::i64, {}}, {DType::f32, {}}}, scatter_attrs(0)), Error);
}

TEST(ScatterRef, HandCheckedValues) {
  Tensor x = from_values(DType::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor idx = from_values(DType::i64, {2, 2}, {2, 0, 1, 1});
  Tensor src = from_values(DType::f32, {2, 3}, {10, 20, 30, 40, 50, 60});
  auto run = [&](const std::string& reduce) {
    OneNode n("scatter", {x.view(), idx.view(), src.view()}, scatter_attrs(1, reduce));
    return values_of(run_node(*n.node, {x.view(), idx.view(), src.view()}, Device::ref)[0]);
  };
  // Row 1 writes 40 then 50 into column 1: the later position wins; add sums both.
  EXPECT_EQ(run("none"), (std::vector<double>{20, 1, 10, 3, 50, 5}));
  EXPECT_EQ(run("add"), (std::vector<double>{20, 1, 12, 3, 94, 5}));
  Tensor rows = from_values(DType::i64, {1, 3}, {1, 0, 1});
  OneNode n("scatter", {x.view(), rows.view(), src.view()}, scatter_attrs(0));
  EXPECT_EQ(values_of(run_node(*n.node, {x.view(), rows.view(), src.view()}, Device::ref)[0]),
            (std::vector<double>{0, 20, 2, 10, 4, 30}));
}

TEST(ScatterCpu, MatchesReference) {
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32, DType::boolean}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor(dt, {5, 7, 3}, 1, -50, 50);
    Tensor src = random_tensor(dt, {6, 9, 7}, 2, -50, 50);
    auto [xv, xstore] = transposed_copy(x);
    for (int dim = 0; dim < 3; ++dim) {
      std::vector<int64_t> ishape = {4, 5, 2};
      ishape[dim] = 6;  // longer than x along dim is fine (duplicates), within src
      Tensor idx = random_tensor(DType::i64, ishape, 3 + dim, 0, static_cast<double>(x.shape()[dim]));
      for (const TensorView& in : {x.view(), xv}) {
        expect_exact({in, idx.view(), src.view()}, scatter_attrs(dim));
        if (dt != DType::boolean) expect_exact({in, idx.view(), src.view()}, scatter_attrs(dim - 3, "add"));
      }
    }
  }
  // Strided src and index; empty index; size-1 dims; a long run of duplicates.
  Tensor x = random_tensor(DType::f32, {6, 5}, 4);
  Tensor src = random_tensor(DType::f32, {6, 4}, 5);
  auto [srcv, sstore] = transposed_copy(src);  // same [6, 4], column-major in memory
  Tensor idx = random_tensor(DType::i64, {6, 4}, 6, 0, 5);
  auto [idxv, istore] = transposed_copy(idx);
  expect_exact({x.view(), idxv, srcv}, scatter_attrs(1, "add"));
  expect_exact({x.view(), idxv, srcv}, scatter_attrs(1));
  Tensor none(DType::i64, {0, 4});
  expect_exact({x.view(), none.view(), src.view()}, scatter_attrs(0, "add"));
  Tensor e(DType::f32, {0, 3});
  Tensor enone(DType::i64, {0, 3});
  expect_exact({e.view(), enone.view(), e.view()}, scatter_attrs(1));
  Tensor one = random_tensor(DType::f32, {1, 1}, 7);
  Tensor zero_idx = from_values(DType::i64, {1, 1}, {0});
  expect_exact({one.view(), zero_idx.view(), one.view()}, scatter_attrs(0, "add"));
  Tensor dup = from_values(DType::i64, {1, 64}, std::vector<double>(64, 2.0));
  Tensor many = random_tensor(DType::f32, {1, 64}, 8);
  expect_exact({x.view(), dup.view(), many.view()}, scatter_attrs(1, "add"));
}

// x broadcast to `shape` (the front end's zero-filled embedding gradient): a one-value x fills
// the output, a row x fills each row; the index is checked against the output's size, not x's.
TEST(ScatterCpu, BroadcastBaseFillsTheOutput) {
  Tensor idx = random_tensor(DType::i64, {9, 6}, 11, 0, 40);
  Tensor src = random_tensor(DType::f32, {9, 6}, 12);
  Attrs a = scatter_attrs(0, "add");
  a["shape"] = std::vector<int64_t>{40, 6};
  Tensor zero = from_values(DType::f32, {1, 1}, {0.0});
  expect_exact({zero.view(), idx.view(), src.view()}, a);
  Tensor row = random_tensor(DType::f32, {1, 6}, 13);
  expect_exact({row.view(), idx.view(), src.view()}, a);
  OneNode n("scatter", {zero.view(), idx.view(), src.view()}, a);
  std::vector<double> got = values_of(run_kernel(*make_kernel_for(n, Device::cpu), n));
  ASSERT_EQ(got.size(), 240u);
  std::vector<double> want(240, 0.0), s = values_of(src), i = values_of(idx);
  for (size_t p = 0; p < 54; ++p) want[static_cast<size_t>(i[p]) * 6 + p % 6] += s[p];
  for (size_t e = 0; e < 240; ++e) EXPECT_NEAR(got[e], want[e], 1e-5) << e;
  // Shape errors: another rank, a dim that is neither 1 nor the target's.
  TensorType i2{DType::i64, {9, 6}}, s2{DType::f32, {9, 6}};
  EXPECT_THROW(infer("scatter", {{DType::f32, {1}}, i2, s2}, a), Error);
  EXPECT_THROW(infer("scatter", {{DType::f32, {2, 6}}, i2, s2}, a), Error);
  EXPECT_EQ(infer("scatter", {{DType::f32, {1, 1}}, i2, s2}, a)[0].shape, (Shape{40, 6}));
}

TEST(ScatterCpu, OutOfRangeIndexThrowsOnBothDevices) {
  Tensor x = random_tensor(DType::f32, {3, 4}, 1);
  Tensor src = random_tensor(DType::f32, {3, 4}, 2);
  for (double bad : {4.0, -1.0}) {
    Tensor idx = from_values(DType::i64, {1, 2}, {0, bad});
    OneNode n("scatter", {x.view(), idx.view(), src.view()}, scatter_attrs(1, "add"));
    for (Device d : {Device::cpu, Device::ref})
      EXPECT_THROW(run_node(*n.node, {x.view(), idx.view(), src.view()}, d), Error) << device_name(d);
  }
}

TEST(ScatterCpu, WritesIntoItsBaseInPlace) {
  // A graph input written in place (a static KV cache, backend._write_inputs_in_place): the
  // output buffer is the base's own memory. The base copy is skipped and the rows land as the
  // reference writes them into a fresh buffer.
  Tensor x = random_tensor(DType::f32, {1, 4, 9, 8}, 1);
  Tensor idx = from_values(DType::i64, {1, 4, 1, 8}, std::vector<double>(32, 5.0));  // row 5 of each head
  Tensor src = random_tensor(DType::f32, {1, 4, 1, 8}, 2);
  OneNode n("scatter", {x.view(), idx.view(), src.view()}, scatter_attrs(2));
  auto want = run_kernel(*make_kernel_for(n, Device::ref), n);
  auto cpu = make_kernel_for(n, Device::cpu);
  TensorView out = x.view();
  Scratch scratch(cpu->scratch_bytes());
  cpu->run(n.views.data(), &out, scratch.get());
  EXPECT_TRUE(all_close(x, want, 0.0, 0.0));
}
