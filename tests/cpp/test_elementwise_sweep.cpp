// The elementwise vocabulary sweep: every elementwise op, generated from the vocabulary itself,
// fast (Device::cpu) kernel against the reference kernel, over four input layouts.
//
//   ElementwiseSweep/OpRow.*/<op>    one test per op table row of class Elementwise: every input
//                                    dtype combination the row's shape function accepts whose
//                                    CPU factory builds a kernel, with default attributes and
//                                    with every Float attribute set (clamp bounds, slopes,
//                                    exponents); the combinations the factory declines (the
//                                    reference runs them) are listed in the test's
//                                    `reference_only` property
//   ElementwiseSweep/Program.*/<op>  one test per EwOp a fused program may hold (ew_op_info), as
//                                    a one-instruction fused_elementwise program on f32 inputs;
//                                    this reaches the scalar ops no node spells with default
//                                    attributes (gelu_tanh) and the fused kernel's own path
//
// A new op is swept by adding its row: nothing here names an op. Inputs come from one default
// domain for every op, chosen so that domain edges are hit without a per-op table: a third of
// the float elements lie on a grid of eighths in [-3, 3] (exact 0, +-1, +-0.5: log(0), atanh(1),
// acosh(1), x / 0, ties for compares and rounding), the rest uniform in [-3, 3]; integers in
// [-5, 5]. Outside an op's domain both kernels must agree on NaN (NaN positions compared, as are
// infinities, exactly). Integer division by zero must throw an Error from both kernels; the
// values are then compared again on divisors drawn without 0.
//
// Layouts of the inputs (the fast kernels read inputs through any strides, 0 included; they
// write contiguous outputs only and refuse others, see BlockProgram::run in
// src/kernels/cpu/elementwise_exec.cpp: the padded case also checks that a strided output is
// refused or written right, never written wrongly):
//   contiguous   [37, 19]
//   transposed   [37, 19] read through swapped strides (a permuted view)
//   broadcast    one input: a [37, 19] view of one row with stride 0; several: input 0 full,
//                odd inputs [1, 19] and even ones [37, 1] (size-1 dims the kernel broadcasts)
//   padded       [37, 19] rows with a stride of 24 (row stride > row length); the padding holds
//                NaN / sentinel values that must not leak into the result
// Odd sizes (37 x 19 = 703 elements) reach the vector kernels' masked tails.
//
// Tolerances, by the compared output's dtype:
//   f32   kF32Rtol / kF32Atol (kernel_test_util.h): the vector polynomials' bound, as in
//         test_elementwise.cpp
//   f64   relative 1e-14, absolute 1e-15: f64 block ops use the reference's formulas in double,
//         transcendental ones glibc's vector math (1-2 ulp) and FMA contraction may differ
//         (test_elementwise_f64.cpp); the absolute part covers results that cancel to ~0
//         (gelu's tanh form in the negative tail)
//   ints, bool   exact
// Not here: special values (inf, NaN inputs), large tensors and threads, per-op known values:
// test_elementwise*.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

constexpr int64_t kRows = 37, kCols = 19, kPaddedStride = 24;
constexpr double kF64Rtol = 1e-14, kF64Atol = 1e-15;
const std::vector<DType> kDtypes = {DType::f32, DType::f64, DType::i64, DType::i32, DType::boolean};

enum class Layout { contiguous, transposed, broadcast, padded };
const Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::broadcast, Layout::padded};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::broadcast: return "broadcast";
    case Layout::padded: return "padded";
  }
  return "?";
}

// ---- Inputs -------------------------------------------------------------------------------

void set_element(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f32: t.ptr<float>()[i] = static_cast<float>(v); break;
    case DType::f64: t.ptr<double>()[i] = v; break;
    case DType::i64: t.ptr<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::boolean: t.ptr<bool>()[i] = v != 0; break;
    default: ADD_FAILURE() << "sweep: dtype " << dtype_name(t.dtype()) << " not handled";
  }
}

// Values from the default domain (file header); `nonzero`: integers without 0.
Tensor domain_tensor(DType dt, const std::vector<int64_t>& shape, uint32_t seed, bool nonzero) {
  Tensor t(dt, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::uniform_int_distribution<int> grid(-24, 24), ints(-5, 5), bit(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = 0;
    if (dt == DType::f32 || dt == DType::f64) {
      v = i % 3 == 0 ? grid(rng) / 8.0 : u(rng);
    } else if (dt == DType::boolean) {
      v = bit(rng);
    } else {
      do v = ints(rng);
      while (nonzero && v == 0);
    }
    set_element(t, i, v);
  }
  return t;
}

// What the padding of a padded view holds: values a kernel must never read.
double poison(DType dt) {
  return dt == DType::f32 || dt == DType::f64 ? std::numeric_limits<double>::quiet_NaN() : 77.0;
}

// Input k (of n) of dtype dt in layout l.
Arg make_input(Layout l, int k, int n, DType dt, uint32_t seed, bool nonzero) {
  switch (l) {
    case Layout::contiguous: return input(domain_tensor(dt, {kRows, kCols}, seed, nonzero));
    case Layout::transposed: return transposed_input(domain_tensor(dt, {kRows, kCols}, seed, nonzero));
    case Layout::broadcast: {
      if (n == 1) {  // a row repeated by a 0 stride: the view a torch expand() gives
        Tensor row = domain_tensor(dt, {1, kCols}, seed, nonzero);
        TensorView v = TensorView::contiguous(row.data(), dt, {kRows, kCols});
        v.strides[0] = 0;
        return strided_input(v, std::move(row));
      }
      if (k == 0) return input(domain_tensor(dt, {kRows, kCols}, seed, nonzero));
      return input(domain_tensor(dt, k % 2 ? std::vector<int64_t>{1, kCols} : std::vector<int64_t>{kRows, 1}, seed, nonzero));
    }
    case Layout::padded: {
      Tensor values = domain_tensor(dt, {kRows, kCols}, seed, nonzero);
      Tensor store(dt, {kRows, kPaddedStride});
      for (int64_t i = 0; i < store.numel(); ++i) set_element(store, i, poison(dt));
      size_t es = dtype_size(dt);
      for (int64_t r = 0; r < kRows; ++r)
        std::memcpy(static_cast<char*>(store.data()) + r * kPaddedStride * es,
                    static_cast<const char*>(values.data()) + r * kCols * es, kCols * es);
      TensorView v = TensorView::contiguous(store.data(), dt, {kRows, kCols});
      v.strides[0] = kPaddedStride;
      return strided_input(v, std::move(store));
    }
  }
  return Arg();
}

// ---- Comparing ----------------------------------------------------------------------------

// all_close with the sweep's per-dtype tolerance (file header).
::testing::AssertionResult outputs_match(const Tensor& got, const Tensor& want) {
  switch (want.dtype()) {
    case DType::f32: return all_close(got, want, kF32Rtol, kF32Atol);
    case DType::f64: return all_close(got, want, kF64Rtol, kF64Atol);
    default: return all_close(got, want, kExact, kExact);
  }
}

// What running a kernel gave: outputs, or the Error it threw.
struct Outcome {
  std::vector<Tensor> outs;
  std::optional<std::string> error;  // the component of the Error
};
Outcome run(const Kernel& k, const OneNode& n) {
  try {
    return {run_kernel_outputs(k, n), std::nullopt};
  } catch (const Error& e) {
    return {{}, e.component()};
  }
}

// Outputs: the runtime hands kernels contiguous outputs (kernel.h). Given a strided one (rows
// padded to kPaddedStride), a fast kernel must either refuse it with an Error (what the fast
// elementwise kernels do today) or write the reference's values through the strides; never
// write wrongly.
::testing::AssertionResult strided_output_refused_or_right(const Kernel& k, const OneNode& n,
                                                           const std::vector<Tensor>& want) {
  std::vector<Tensor> stores;
  std::vector<TensorView> ov;
  for (Value* o : n.node->outputs) {
    std::vector<int64_t> shape = shape_values(o->type.shape);
    if (shape.size() != 2) return ::testing::AssertionSuccess();  // the sweep's outputs are [rows, cols]
    stores.emplace_back(o->type.dtype, std::vector<int64_t>{shape[0], kPaddedStride});
    TensorView v = TensorView::contiguous(stores.back().data(), o->type.dtype, shape);
    v.strides[0] = kPaddedStride;
    ov.push_back(v);
  }
  Scratch scratch(k.scratch_bytes());
  try {
    k.run(n.views.data(), ov.data(), scratch.get());
  } catch (const Error&) {
    return ::testing::AssertionSuccess();
  }
  for (size_t j = 0; j < ov.size(); ++j) {
    auto r = all_close(ov[j], want[j].view(), kExact, kExact);
    if (!r) return ::testing::AssertionFailure() << k.name() << " wrote a strided output wrongly: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

struct Tally {
  int compared = 0;                // (attributes, dtypes, layout) cases compared
  std::set<std::string> declined;  // dtype combinations the CPU factory declines (the reference runs them)
};

// One node case over every layout. Inputs are drawn per layout; when the reference refuses them
// (integer division by zero), the fast kernel must refuse them too, and the values are compared
// again on inputs without zeros.
void sweep_node(const std::string& op, const std::vector<DType>& dts, const Attrs& attrs, const std::string& label,
                Tally& tally) {
  const int n = static_cast<int>(dts.size());
  bool fast_seen = false;
  for (Layout l : kLayouts) {
    SCOPED_TRACE(label + " " + layout_name(l));
    for (bool nonzero : {false, true}) {
      std::vector<Arg> args;
      for (int k = 0; k < n; ++k) args.push_back(make_input(l, k, n, dts[k], 100 + 17 * k, nonzero));
      OneNode node(op, std::move(args), attrs);
      const KernelFactory* f = KernelRegistry::get().find(op, Device::cpu);
      std::unique_ptr<Kernel> fast = f ? (*f)(node.context()) : nullptr;
      if (!fast) {
        // Factories see shapes, not strides: a decline is per dtype combination, never per layout.
        EXPECT_FALSE(fast_seen) << op << " " << label << ": the CPU factory declines " << layout_name(l)
                                << " inputs but built a kernel for another layout";
        // A declined combination runs on the reference loop, so the partitioner's probe must
        // say so too: a large node of it then stays in PyTorch instead.
        EXPECT_FALSE(probe_fast_kernel(*node.node, 4096).has_value())
            << op << " " << label << ": the CPU factory declines it but probe_fast_kernel reports a fast kernel";
        tally.declined.insert(label);
        return;
      }
      fast_seen = true;
      auto ref = make_kernel_for(node, Device::ref);
      ASSERT_TRUE(ref);
      Outcome want = run(*ref, node), got = run(*fast, node);
      if (want.error) {
        EXPECT_EQ(got.error, want.error) << op << " " << label << ": the reference threw, " << fast->name()
                                         << (got.error ? " threw for another component" : " did not");
        EXPECT_FALSE(nonzero) << op << " " << label << ": the reference refuses inputs drawn without zeros";
        continue;  // again, without zeros
      }
      ASSERT_FALSE(got.error) << op << " " << label << ": " << fast->name() << " threw (component "
                              << *got.error << ") where the reference ran";
      for (size_t k = 0; k < want.outs.size(); ++k)
        EXPECT_TRUE(outputs_match(got.outs[k], want.outs[k]))
            << op << " " << label << " " << layout_name(l) << " via " << fast->name();
      if (l == Layout::padded) {
        // Compared exactly with what this kernel wrote contiguously (same inputs, same code).
        EXPECT_TRUE(strided_output_refused_or_right(*fast, node, got.outs)) << op << " " << label;
      }
      ++tally.compared;
      break;  // the reference accepted the default domain: nothing to redraw
    }
  }
}

// The comparison the sweep leans on: an infinity matches only itself (its relative tolerance
// would be infinite), a NaN only a NaN.
TEST(ElementwiseSweepCompare, InfinitiesAndNaNsMatchOnlyThemselves) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto one = [](double v) { return from_values(DType::f64, {1}, {v}); };
  EXPECT_FALSE(all_close(one(5), one(inf), kF64Rtol, kF64Atol));
  EXPECT_FALSE(all_close(one(inf), one(5), kF64Rtol, kF64Atol));
  EXPECT_FALSE(all_close(one(-inf), one(inf), kF64Rtol, kF64Atol));
  EXPECT_FALSE(all_close(one(nan), one(inf), kF64Rtol, kF64Atol));
  EXPECT_TRUE(all_close(one(inf), one(inf), kF64Rtol, kF64Atol));
  EXPECT_TRUE(all_close(one(nan), one(nan), kF64Rtol, kF64Atol));
}

// ---- Generating the cases from the op table -----------------------------------------------

std::vector<std::string> elementwise_rows() {
  std::vector<std::string> r;
  for (const std::string& name : OpTable::get().names())
    if (OpTable::get().at(name).cls == OpClass::Elementwise) r.push_back(name);
  return r;
}

// Attribute sets for a row: the defaults, and (when the row has Float attributes) every Float
// attribute set, the k-th to -0.5 + 1.75 k (clamp(-0.5, 1.25), a negative slope or exponent):
// values that make each parameter matter. Required attributes without a default get a value of
// their kind; a required string can only be a dtype name (cast's target): one set per dtype.
// Returns false (and the reason) for a required attribute the sweep cannot fill.
bool attribute_sets(const OpDef& def, std::vector<std::pair<std::string, Attrs>>& sets, std::string& why) {
  std::vector<std::pair<std::string, Attrs>> base = {{"", {}}};
  bool has_float = false;
  for (const AttrSpec& a : def.attrs) {
    has_float |= a.kind == Attr::Kind::Float;
    if (a.default_value) continue;
    std::vector<std::pair<std::string, Attr>> values;
    switch (a.kind) {
      case Attr::Kind::Float: values = {{"1.7", Attr(1.7)}}; break;
      case Attr::Kind::Int: values = {{"2", Attr(int64_t{2})}}; break;
      case Attr::Kind::Bool: values = {{"false", Attr(false)}, {"true", Attr(true)}}; break;
      case Attr::Kind::Str:
        for (DType dt : kDtypes) values.push_back({dtype_name(dt), Attr(std::string(dtype_name(dt)))});
        break;
      default: why = "required attribute '" + a.name + "' of a kind the sweep has no value for"; return false;
    }
    std::vector<std::pair<std::string, Attrs>> next;
    for (const auto& [label, attrs] : base)
      for (const auto& [vl, v] : values) {
        Attrs x = attrs;
        x[a.name] = v;
        next.push_back({label + " " + a.name + "=" + vl, x});
      }
    base = std::move(next);
  }
  sets = base;
  if (has_float) {
    for (const auto& [label, attrs] : base) {
      Attrs x = attrs;
      std::string l = label;
      int k = 0;
      for (const AttrSpec& a : def.attrs)
        if (a.kind == Attr::Kind::Float) {
          double v = -0.5 + 1.75 * k++;
          x[a.name] = v;
          l += " " + a.name + "=" + std::to_string(v);
        }
      sets.push_back({l, x});
    }
  }
  return true;
}

// Input dtype combinations the row's shape function accepts: input 0 takes each dtype the row
// lists, the other inputs one common dtype (input 0's for plain binary ops, any for where's
// branches), as the front end's casts give them.
std::vector<std::vector<DType>> dtype_combinations(const OpDef& def, const Attrs& attrs) {
  std::vector<std::vector<DType>> r;
  const int n = def.min_inputs;
  const std::vector<DType>& firsts = def.dtypes.empty() ? kDtypes : def.dtypes;
  for (DType d0 : firsts)
    for (DType rest : kDtypes) {
      if (n == 1 && rest != d0) continue;
      std::vector<DType> dts(n, rest);
      dts[0] = d0;
      std::vector<TensorType> types;
      for (DType d : dts) types.push_back({d, {Dim(3)}});
      try {
        OpTable::infer(def, types, attrs);
      } catch (const Error&) {
        continue;
      }
      r.push_back(dts);
    }
  return r;
}

std::string dtypes_label(const std::vector<DType>& dts) {
  std::string s;
  for (DType d : dts) s += (s.empty() ? "" : ",") + std::string(dtype_name(d));
  return s;
}

class OpRow : public ::testing::TestWithParam<std::string> {};

TEST_P(OpRow, FastMatchesReferenceOnEveryLayout) {
  const OpDef& def = OpTable::get().at(GetParam());
  ASSERT_EQ(def.min_inputs, def.max_inputs) << "the sweep builds fixed-arity elementwise nodes";
  std::vector<std::pair<std::string, Attrs>> sets;
  std::string why;
  ASSERT_TRUE(attribute_sets(def, sets, why)) << def.name << ": " << why << "; give the sweep a value for it";
  Tally tally;
  int combos = 0;
  for (const auto& [alabel, attrs] : sets)
    for (const std::vector<DType>& dts : dtype_combinations(def, attrs)) {
      ++combos;
      sweep_node(def.name, dts, attrs, dtypes_label(dts) + alabel, tally);
    }
  ASSERT_GT(combos, 0) << def.name << ": the shape function accepts none of the sweep's dtype combinations";
  std::ostringstream declined;
  for (const std::string& d : tally.declined) declined << "[" << d << "] ";
  RecordProperty("reference_only", declined.str());
  // A reference-only op (erfinv) compares nothing here; what it is checked for instead is
  // that the probe reports every declined combination, above.
}

INSTANTIATE_TEST_SUITE_P(ElementwiseSweep, OpRow, ::testing::ValuesIn(elementwise_rows()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- Every scalar op of the program vocabulary --------------------------------------------

// Program spellings of every EwOp a fused program may hold.
std::vector<std::string> program_ops() {
  std::vector<std::string> r;
  for (int k = 0; k < static_cast<int>(EwOp::count_); ++k)
    if (ew_op_info(static_cast<EwOp>(k)).in_program) r.push_back(ew_op_info(static_cast<EwOp>(k)).name);
  return r;
}

class Program : public ::testing::TestWithParam<std::string> {};

TEST_P(Program, FusedKernelMatchesReferenceOnEveryLayout) {
  const EwOpInfo& info = ew_op_info(*ew_op_from_name(GetParam()));
  std::string text = std::string(info.bool_result ? "bool: " : "f32: ") + info.name;
  for (int k = 0; k < info.arity; ++k) text += " $" + std::to_string(k);
  for (Layout l : kLayouts) {
    SCOPED_TRACE(text + " " + layout_name(l));
    std::vector<Arg> args;
    for (int k = 0; k < info.arity; ++k) args.push_back(make_input(l, k, info.arity, DType::f32, 200 + 17 * k, false));
    OneNode node("fused_elementwise", std::move(args), {{"program", text}});
    std::string ran;
    EXPECT_TRUE(cpu_matches_ref(node, kF32Rtol, kF32Atol, Fast::required, &ran));
    EXPECT_EQ(ran, "cpu_fused_elementwise_f32_avx2");
  }
}

INSTANTIATE_TEST_SUITE_P(ElementwiseSweep, Program, ::testing::ValuesIn(program_ops()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
