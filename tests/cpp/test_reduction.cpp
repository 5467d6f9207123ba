// Reductions: shape functions, the reference kernels on hand-checked values, and every fast
// f32 kernel against the reference over odd shapes, empty and size-1 dims, negative dims,
// keepdim, strided inputs and sizes large enough to take the parallel paths.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// f32 blocked sums vs a double reference: a handful of f32 roundings of partial sums.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;
// Sums over ~1e5 elements: partials reach ~1e3 in magnitude and each join rounds at ~1e3 * 6e-8.
constexpr double kLargeAtol = 1e-3;
// amax/amin/argmax/cumsum-in-double pick or copy values: kExact (kernel_test_util.h).

Attrs reduce_attrs(std::vector<int64_t> dims, bool keepdim) {
  return {{"dims", Attr(std::move(dims))}, {"keepdim", Attr(keepdim)}};
}

}  // namespace

TEST(ReductionShape, DimsKeepdimAndSymbolic) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 12, 64}};
  EXPECT_EQ(infer("sum", {x}, reduce_attrs({-1}, false))[0].shape, (Shape{s, 12}));
  EXPECT_EQ(infer("mean", {x}, reduce_attrs({0, 2}, true))[0].shape, (Shape{1, 12, 1}));
  EXPECT_EQ(infer("amax", {x}, reduce_attrs({}, false))[0].shape, (Shape{}));
  EXPECT_EQ(infer("amax", {x}, reduce_attrs({}, true))[0].shape, (Shape{1, 1, 1}));
  auto am = infer("argmax", {x}, {{"dim", Attr(1)}, {"keepdim", Attr(true)}})[0];
  EXPECT_EQ(am.dtype, DType::i64);
  EXPECT_EQ(am.shape, (Shape{s, 1, 64}));
  EXPECT_EQ(infer("cumsum", {x}, {{"dim", Attr(-2)}})[0], x);
  EXPECT_EQ(infer("var", {x}, {{"dims", Attr(std::vector<int64_t>{1})}, {"correction", Attr(0.0)}})[0].shape,
            (Shape{s, 64}));
  // A 0-d input reduces over dim 0 / -1 to a 0-d output, as in torch.
  EXPECT_EQ(infer("sum", {{DType::f32, {}}}, reduce_attrs({-1}, false))[0].shape, (Shape{}));
}

TEST(ReductionShape, ClearErrors) {
  TensorType x{DType::f32, {2, 3}};
  EXPECT_THROW(infer("sum", {x}, reduce_attrs({2}, false)), Error);      // out of range
  EXPECT_THROW(infer("sum", {x}, reduce_attrs({1, -1}, false)), Error);  // duplicate
  EXPECT_THROW(infer("argmax", {x}, {}), Error);                         // dim is required
  EXPECT_THROW(infer("mean", {{DType::i64, {2}}}, {}), Error);           // mean is float only
  // No identity for max over an empty dim; sum is fine (0).
  EXPECT_THROW(infer("amax", {{DType::f32, {0, 3}}}, reduce_attrs({0}, false)), Error);
  EXPECT_NO_THROW(infer("sum", {{DType::f32, {0, 3}}}, reduce_attrs({0}, false)));
  try {
    infer("sum", {x}, reduce_attrs({0, 0}, false));
    FAIL() << "duplicate dims must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "sum");
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos);
  }
}

TEST(ReductionRef, HandCheckedValues) {
  Tensor x = from_values(DType::f32, {2, 3}, {1, 5, 3, 4, -2, 4});
  auto run = [&](const std::string& op, Attrs a) {
    OneNode n(op, {x.view()}, std::move(a));
    return values_of(run_node(*n.node, {x.view()}, Device::ref)[0]);
  };
  EXPECT_EQ(run("sum", reduce_attrs({1}, false)), (std::vector<double>{9, 6}));
  EXPECT_EQ(run("sum", reduce_attrs({}, false)), (std::vector<double>{15}));
  EXPECT_EQ(run("mean", reduce_attrs({0}, true)), (std::vector<double>{2.5, 1.5, 3.5}));
  EXPECT_EQ(run("amax", reduce_attrs({-1}, false)), (std::vector<double>{5, 4}));
  EXPECT_EQ(run("amin", reduce_attrs({0}, false)), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(run("prod", reduce_attrs({1}, false)), (std::vector<double>{15, -32}));
  EXPECT_EQ(run("argmax", {{"dim", Attr(1)}}), (std::vector<double>{1, 0}));  // first of the tied 4s
  EXPECT_EQ(run("argmin", {{"dim", Attr(0)}}), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(run("cumsum", {{"dim", Attr(1)}}), (std::vector<double>{1, 6, 9, 4, 2, 6}));
  auto v = run("var", {{"dims", Attr(std::vector<int64_t>{1})}});
  EXPECT_NEAR(v[0], 4.0, 1e-6);  // mean 3, squares 4+4+0, /2
  EXPECT_NEAR(v[1], 12.0, 1e-6);  // mean 2, squares 4+16+4, /2
  // Empty reductions: sum 0, prod 1, mean NaN (as torch).
  Tensor e(DType::f32, {0, 2});
  OneNode ns("sum", {e.view()}, reduce_attrs({0}, false));
  EXPECT_EQ(values_of(run_node(*ns.node, {e.view()}, Device::ref)[0]), (std::vector<double>{0, 0}));
  OneNode nm("mean", {e.view()}, reduce_attrs({0}, false));
  EXPECT_TRUE(std::isnan(values_of(run_node(*nm.node, {e.view()}, Device::ref)[0])[0]));
}

TEST(ReductionCpu, MatchesRefOverShapesDimsKeepdim) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1}, {3, 5}, {2, 3, 17}, {4, 1, 33, 5}, {0, 5}, {5, 0}, {9, 1}};
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {-1}, {0}, {1}, {0, 2}, {-1, -3}, {1, 3}};
  const std::vector<std::string> ops = {"sum", "mean", "amax", "amin", "prod", "var"};
  uint32_t seed = 0;
  for (const auto& shape : shapes) {
    Tensor x = random_tensor(DType::f32, shape, ++seed);
    int rank = static_cast<int>(shape.size());
    for (const auto& dims : dim_sets) {
      bool valid = true;
      for (int64_t d : dims) valid &= d >= -rank && d < rank;
      if (!valid) continue;
      for (bool keepdim : {false, true})
        for (const std::string& op : ops) {
          Attrs a = reduce_attrs(dims, keepdim);
          bool empty_reduce = false;
          for (int d = 0; d < rank; ++d) {
            bool reduced = dims.empty();
            for (int64_t k : dims) reduced |= (k + rank) % rank == d;
            empty_reduce |= reduced && shape[d] == 0;
          }
          if ((op == "amax" || op == "amin") && empty_reduce) continue;  // shape function rejects it
          SCOPED_TRACE(op + " dims " + Attr(dims).str() + " keepdim " + std::to_string(keepdim) + " shape " +
                       Attr(shape).str());
          expect_matches_ref(op, {x.view()}, a, kRtol, kAtol);
        }
    }
  }
}

TEST(ReductionCpu, StridedInputs) {
  Tensor x = random_tensor(DType::f32, {3, 19, 21}, 7);
  auto [v, store] = transposed_copy(x);
  for (const std::string& op : {"sum", "mean", "amax", "amin", "var"})
    for (const auto& dims : std::vector<std::vector<int64_t>>{{-1}, {1}, {0}, {}, {0, 2}})
      expect_matches_ref(op, {v}, reduce_attrs(dims, false), kRtol, kAtol);
  for (int dim : {0, 1, -1}) {
    expect_matches_ref("argmax", {v}, {{"dim", Attr(dim)}}, kExact, kExact);
    expect_matches_ref("cumsum", {v}, {{"dim", Attr(dim)}}, kRtol, kAtol);
  }
}

TEST(ReductionCpu, LargeRowsColumnsAndSplitRows) {
  Tensor rows = random_tensor(DType::f32, {64, 3001}, 1);
  expect_matches_ref("sum", {rows.view()}, reduce_attrs({1}, false), kRtol, kAtol);
  expect_matches_ref("amax", {rows.view()}, reduce_attrs({1}, true), kExact, kExact);
  Tensor cols = random_tensor(DType::f32, {5000, 40}, 2);  // column path, R spans many row blocks
  expect_matches_ref("sum", {cols.view()}, reduce_attrs({0}, false), kRtol, kLargeAtol);
  expect_matches_ref("mean", {cols.view()}, reduce_attrs({0}, false), kRtol, kAtol);
  expect_matches_ref("amin", {cols.view()}, reduce_attrs({0}, false), kExact, kExact);
  // More kept columns than one task's chunk (256): every chunk writes its own columns.
  Tensor wide = random_tensor(DType::f32, {3, 300}, 5);
  for (const std::string op : {"sum", "mean", "amax", "amin"})
    expect_matches_ref(op, {wide.view()}, reduce_attrs({0}, false), kRtol, kAtol);
  Tensor one = random_tensor(DType::f32, {1, 200003}, 3);  // one huge row: split across threads
  expect_matches_ref("sum", {one.view()}, reduce_attrs({}, false), kRtol, kLargeAtol);
  expect_matches_ref("mean", {one.view()}, reduce_attrs({-1}, false), kRtol, kAtol);
  expect_matches_ref("amax", {one.view()}, reduce_attrs({}, false), kExact, kExact);
  expect_matches_ref("var", {one.view()}, reduce_attrs({}, false), kRtol, kAtol);
}

TEST(ReductionCpu, NaNPropagatesLikeTorch) {
  Tensor x = random_tensor(DType::f32, {3, 37}, 4);
  x.ptr<float>()[40] = NAN;  // row 1, col 3
  x.ptr<float>()[60] = NAN;  // row 1, col 23
  for (const std::string& op : {"amax", "amin", "sum"}) {
    OneNode n(op, {x.view()}, reduce_attrs({1}, false));
    auto got = values_of(run_node(*n.node, {x.view()}, Device::cpu)[0]);
    EXPECT_FALSE(std::isnan(got[0])) << op;
    EXPECT_TRUE(std::isnan(got[1])) << op;
    expect_matches_ref(op, {x.view()}, reduce_attrs({1}, false), kRtol, kAtol);
  }
  for (const std::string& op : {"argmax", "argmin"}) {
    OneNode n(op, {x.view()}, {{"dim", Attr(1)}});
    EXPECT_EQ(values_of(run_node(*n.node, {x.view()}, Device::cpu)[0])[1], 3) << op << ": first NaN wins";
    expect_matches_ref(op, {x.view()}, {{"dim", Attr(-1)}}, kExact, kExact);
  }
}

TEST(ReductionCpu, ArgTiesPickTheFirstIndex) {
  Tensor x(DType::f32, {2, 20});
  for (int i = 0; i < 40; ++i) x.ptr<float>()[i] = static_cast<float>(i % 5);  // max 4 at 4, 9, 14, 19
  OneNode n("argmax", {x.view()}, {{"dim", Attr(1)}});
  EXPECT_EQ(values_of(run_node(*n.node, {x.view()}, Device::cpu)[0]), (std::vector<double>{4, 4}));
  for (auto shape : std::vector<std::vector<int64_t>>{{5, 9}, {2, 3, 11}, {1}, {1, 300}}) {
    Tensor r = random_tensor(DType::f32, shape, 9, -2, 2);
    for (int dim = -1; dim >= -static_cast<int>(shape.size()); --dim)
      for (bool keep : {false, true}) {
        expect_matches_ref("argmax", {r.view()}, {{"dim", Attr(dim)}, {"keepdim", Attr(keep)}}, kExact, kExact);
        expect_matches_ref("argmin", {r.view()}, {{"dim", Attr(dim)}, {"keepdim", Attr(keep)}}, kExact, kExact);
      }
  }
}

TEST(ReductionCpu, Cumsum) {
  for (auto shape : std::vector<std::vector<int64_t>>{{11}, {1}, {0}, {3, 300}, {4, 5, 6}, {2, 0, 3}, {7, 600}})
    for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
      Tensor x = random_tensor(DType::f32, shape, dim);
      expect_matches_ref("cumsum", {x.view()}, {{"dim", Attr(dim - static_cast<int>(shape.size()))}}, kRtol, kAtol);
    }
}

// ---- integers (cpu/reduction_int.cpp) ----
// Integer results are exact on both sides (int64 accumulation, the same wrap on overflow).
namespace {
void expect_int_matches_ref(const std::string& op, const std::vector<TensorView>& inputs, const Attrs& attrs) {
  OneNode n(op, inputs_of(inputs), attrs);
  EXPECT_EQ(n.kernel_name(Device::cpu), "cpu_int_" + op);
  EXPECT_TRUE(n.node->outputs[0]->type.dtype == inputs[0].dtype);
  auto want = run_node(*n.node, inputs, Device::ref);
  for (int threads : {1, 2}) {
    auto got = run_node(*n.node, inputs, Device::cpu, nullptr, threads);
    EXPECT_TRUE(all_close(got[0], want[0], 0.0, 0.0)) << op << " threads " << threads;
  }
}
}  // namespace

TEST(ReductionCpuInt, MatchesRefOverShapesDimsKeepdim) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1}, {3, 5}, {2, 3, 17}, {4, 1, 33, 5}, {0, 5}, {5, 0}, {300, 130}};
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {-1}, {0}, {1}, {0, 2}, {-1, -3}, {1, 3}};
  uint32_t seed = 0;
  const DType dt = DType::i64;
  for (const auto& shape : shapes) {
    Tensor x = random_tensor(dt, shape, ++seed, -9, 9);
    // prod over rows of up to 300 values in [-9, 9) overflows int64, and the reference's signed
    // overflow is undefined behaviour (UBSan stops the ASan lane): prod gets values in [-1, 1].
    Tensor ones = random_tensor(dt, shape, seed, -1, 2);
    int rank = static_cast<int>(shape.size());
    for (const auto& dims : dim_sets) {
      bool valid = true, empty_reduce = false;
      for (int64_t d : dims) valid &= d >= -rank && d < rank;
      if (!valid) continue;
      for (int d = 0; d < rank; ++d) {
        bool reduced = dims.empty();
        for (int64_t k : dims) reduced |= (k + rank) % rank == d;
        empty_reduce |= reduced && shape[d] == 0;
      }
      for (bool keepdim : {false, true})
        for (const std::string op : {"sum", "prod", "amax", "amin"}) {
          if ((op == "amax" || op == "amin") && empty_reduce) continue;
          SCOPED_TRACE(op + " " + dtype_name(dt) + " dims " + Attr(dims).str() + " shape " + Attr(shape).str());
          expect_int_matches_ref(op, {(op == "prod" ? ones : x).view()}, reduce_attrs(dims, keepdim));
        }
    }
    for (int dim = 0; dim < rank; ++dim) {
      SCOPED_TRACE(std::string("cumsum ") + dtype_name(dt) + " dim " + std::to_string(dim) + " shape " + Attr(shape).str());
      expect_int_matches_ref("cumsum", {x.view()}, {{"dim", Attr(dim - rank)}});
    }
  }
}

TEST(ReductionCpuInt, StridedInputsAndWrapAround) {
  Tensor x = random_tensor(DType::i64, {3, 19, 21}, 7, -1000, 1000);
  auto [v, store] = transposed_copy(x);
  for (const std::string op : {"sum", "amax", "amin"})
    for (const auto& dims : std::vector<std::vector<int64_t>>{{-1}, {1}, {0}, {}, {0, 2}})
      expect_int_matches_ref(op, {v}, reduce_attrs(dims, false));
  for (int dim : {0, 1, -1}) expect_int_matches_ref("cumsum", {v}, {{"dim", Attr(dim)}});
  // Sums past the type's range wrap as two's complement, as in PyTorch: max + max + max is
  // max - 2. Checked by hand (the reference's signed overflow is not defined behaviour).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor big(DType::i64, {4, 3});
  std::fill(big.ptr<int64_t>(), big.ptr<int64_t>() + 12, kMax);
  OneNode sum("sum", {big.view()}, reduce_attrs({1}, false));
  const std::vector<Tensor> total = run_node(*sum.node, {big.view()}, Device::cpu);
  EXPECT_EQ(total[0].ptr<int64_t>()[3], kMax - 2);
  OneNode cumsum("cumsum", {big.view()}, {{"dim", Attr(1)}});
  const std::vector<Tensor> sums = run_node(*cumsum.node, {big.view()}, Device::cpu);
  const int64_t* c = sums[0].ptr<int64_t>();
  EXPECT_EQ(c[9], kMax);
  EXPECT_EQ(c[10], -2);
  EXPECT_EQ(c[11], kMax - 2);
}

// A symbolic size as a tensor, sum(expand(1, [s])): the lowering's form, on every decode step.
TEST(ReductionCpuInt, KernelRunsEveryShape) {
  Tensor x = random_tensor(DType::i64, {5, 7}, 3, -9, 9);
  OneNode n("sum", {x.view()}, reduce_attrs({1}, false));
  EXPECT_EQ(n.kernel_name(Device::cpu), "cpu_int_sum");
  Tensor other = random_tensor(DType::i64, {5, 40}, 4, -9, 9);
  auto got = run_node(*n.node, {other.view()}, Device::cpu);
  for (int r = 0; r < 5; ++r) {
    int64_t s = 0;
    for (int c = 0; c < 40; ++c) s += other.ptr<int64_t>()[r * 40 + c];
    EXPECT_EQ(got[0].ptr<int64_t>()[r], s);
  }
}

// ---- f64 (cpu/reduction_f64.cpp) ----
// Tolerance: the reference sums in one running double, the fast kernel pairwise; the two differ
// by a few ulp of the sum of |x| (relative 1e-12 plus an absolute 1e-10 for sums over ~2e5
// elements of magnitude <= 2, whose running sum errs by up to ~2e5 * 2 * 1.1e-16 * log).
// amax/amin/argmax/argmin pick values: exact. cumsum is a running sum on both sides: exact.
namespace {
constexpr double kF64Rtol = 1e-12;
constexpr double kF64Atol = 1e-10;

void expect_f64_matches_ref(const std::string& op, const std::vector<TensorView>& inputs, const Attrs& attrs,
                            double rtol, double atol) {
  OneNode n(op, inputs_of(inputs), attrs);
  EXPECT_EQ(n.kernel_name(Device::cpu), "cpu_f64_" + op);
  auto want = run_node(*n.node, inputs, Device::ref);
  for (int threads : {1, 2}) {
    auto got = run_node(*n.node, inputs, Device::cpu, nullptr, threads);
    EXPECT_TRUE(all_close(got[0], want[0], rtol, atol)) << op << " threads " << threads;
  }
}
bool exact_op(const std::string& op) { return op == "amax" || op == "amin" || op == "argmax" || op == "argmin"; }
}  // namespace

TEST(ReductionCpuF64, MatchesRefOverShapesDimsKeepdim) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {1}, {3, 5}, {2, 3, 17}, {4, 1, 33, 5}, {0, 5}, {5, 0}, {9, 1}, {3, 300}};
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {-1}, {0}, {1}, {0, 2}, {-1, -3}, {1, 3}};
  uint32_t seed = 0;
  for (const auto& shape : shapes) {
    Tensor x = random_tensor(DType::f64, shape, ++seed);
    int rank = static_cast<int>(shape.size());
    for (const auto& dims : dim_sets) {
      bool valid = true;
      for (int64_t d : dims) valid &= d >= -rank && d < rank;
      if (!valid) continue;
      bool empty_reduce = false;
      for (int d = 0; d < rank; ++d) {
        bool reduced = dims.empty();
        for (int64_t k : dims) reduced |= (k + rank) % rank == d;
        empty_reduce |= reduced && shape[d] == 0;
      }
      for (bool keepdim : {false, true})
        for (const std::string op : {"sum", "mean", "amax", "amin", "prod", "var"}) {
          if ((op == "amax" || op == "amin") && empty_reduce) continue;
          SCOPED_TRACE(op + " dims " + Attr(dims).str() + " shape " + Attr(shape).str());
          double t = exact_op(op) ? 0.0 : kF64Rtol;
          expect_f64_matches_ref(op, {x.view()}, reduce_attrs(dims, keepdim), t, t ? 1e-14 : 0.0);
        }
    }
    for (int dim = 0; dim < rank; ++dim) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " shape " + Attr(shape).str());
      expect_f64_matches_ref("cumsum", {x.view()}, {{"dim", Attr(dim)}}, 0.0, 0.0);
      if (shape[dim] == 0) continue;
      expect_f64_matches_ref("argmax", {x.view()}, {{"dim", Attr(dim)}}, 0.0, 0.0);
      expect_f64_matches_ref("argmin", {x.view()}, {{"dim", Attr(dim)}, {"keepdim", Attr(true)}}, 0.0, 0.0);
    }
  }
}

TEST(ReductionCpuF64, StridedLargeAndSplitRows) {
  Tensor x = random_tensor(DType::f64, {3, 19, 21}, 7);
  auto [v, store] = transposed_copy(x);
  for (const std::string op : {"sum", "mean", "amax", "amin", "var", "prod"})
    for (const auto& dims : std::vector<std::vector<int64_t>>{{-1}, {1}, {0}, {}, {0, 2}})
      expect_f64_matches_ref(op, {v}, reduce_attrs(dims, false), exact_op(op) ? 0.0 : kF64Rtol, exact_op(op) ? 0.0 : 1e-14);
  for (int dim : {0, 1, -1}) {
    expect_f64_matches_ref("argmax", {v}, {{"dim", Attr(dim)}}, 0.0, 0.0);
    expect_f64_matches_ref("cumsum", {v}, {{"dim", Attr(dim)}}, 0.0, 0.0);
  }
  Tensor rows = random_tensor(DType::f64, {64, 3001}, 1);
  expect_f64_matches_ref("sum", {rows.view()}, reduce_attrs({1}, false), kF64Rtol, kF64Atol);
  expect_f64_matches_ref("var", {rows.view()}, reduce_attrs({1}, false), kF64Rtol, kF64Atol);
  Tensor cols = random_tensor(DType::f64, {5000, 40}, 2);  // column path over many row blocks
  expect_f64_matches_ref("sum", {cols.view()}, reduce_attrs({0}, false), kF64Rtol, kF64Atol);
  expect_f64_matches_ref("amin", {cols.view()}, reduce_attrs({0}, false), 0.0, 0.0);
  Tensor one = random_tensor(DType::f64, {1, 200003}, 3);  // one huge row: split across threads
  for (const std::string op : {"sum", "mean", "amax", "var"})
    expect_f64_matches_ref(op, {one.view()}, reduce_attrs({}, false), exact_op(op) ? 0.0 : kF64Rtol,
                           exact_op(op) ? 0.0 : kF64Atol);
}

// Pairwise summation keeps a long sum accurate where a running sum drifts: 1e6 copies of 0.1
// (not exact in binary) sum to 100000 within a few ulp.
TEST(ReductionCpuF64, LongSumIsAccurate) {
  Tensor x(DType::f64, {1000000});
  std::fill(x.ptr<double>(), x.ptr<double>() + 1000000, 0.1);
  OneNode n("sum", {x.view()}, reduce_attrs({}, false));
  double got = run_node(*n.node, {x.view()}, Device::cpu)[0].ptr<double>()[0];
  EXPECT_NEAR(got, 100000.0, 1e-9);
}

TEST(ReductionCpuF64, NaNAndInfLikeTorch) {
  Tensor x = random_tensor(DType::f64, {4, 37}, 4);
  x.ptr<double>()[40] = NAN;  // row 1, col 3
  x.ptr<double>()[60] = NAN;  // row 1, col 23
  x.ptr<double>()[80] = INFINITY;  // row 2
  x.ptr<double>()[81] = -INFINITY;
  x.ptr<double>()[120] = -INFINITY;  // row 3
  for (const std::string op : {"amax", "amin", "sum", "mean", "var", "prod"}) {
    OneNode n(op, {x.view()}, reduce_attrs({1}, false));
    auto got = values_of(run_node(*n.node, {x.view()}, Device::cpu)[0]);
    EXPECT_FALSE(std::isnan(got[0])) << op;
    EXPECT_TRUE(std::isnan(got[1])) << op;
    expect_f64_matches_ref(op, {x.view()}, reduce_attrs({1}, false), exact_op(op) ? 0.0 : kF64Rtol, 0.0);
    expect_f64_matches_ref(op, {x.view()}, reduce_attrs({0}, false), exact_op(op) ? 0.0 : kF64Rtol, 0.0);
  }
  for (const std::string op : {"argmax", "argmin"}) {
    OneNode n(op, {x.view()}, {{"dim", Attr(1)}});
    EXPECT_EQ(values_of(run_node(*n.node, {x.view()}, Device::cpu)[0])[1], 3) << op << ": first NaN wins";
    expect_f64_matches_ref(op, {x.view()}, {{"dim", Attr(-1)}}, 0.0, 0.0);
    expect_f64_matches_ref(op, {x.view()}, {{"dim", Attr(0)}}, 0.0, 0.0);
  }
  expect_f64_matches_ref("cumsum", {x.view()}, {{"dim", Attr(1)}}, 0.0, 0.0);
  Tensor ties(DType::f64, {2, 20});
  for (int i = 0; i < 40; ++i) ties.ptr<double>()[i] = static_cast<double>(i % 5);  // max 4 at 4, 9, 14, 19
  OneNode am("argmax", {ties.view()}, {{"dim", Attr(1)}});
  EXPECT_EQ(values_of(run_node(*am.node, {ties.view()}, Device::cpu)[0]), (std::vector<double>{4, 4}));
}
