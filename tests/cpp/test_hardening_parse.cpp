// Memory safety of what the process reads (issue 14, items 4-8 and 13): crafted text IR,
// crafted cache entries (with a valid checksum: the checksum detects accidents, not intent)
// and shape expressions must end in an updraft Error naming the component, never in a
// signal, an out-of-bounds access or an allocation the input cannot justify.
// The inputs the fuzzers found are replayed by test_fuzz_regressions.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cache/entry.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/version.h"
#include "ir/dim.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "test_util.h"

using namespace updraft;

namespace {

// Runs f and expects an updraft Error from `component` whose text contains `what`.
void expect_error(const std::function<void()>& f, const std::string& component, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "expected Error(\"" << component << "\", ...) containing '" << what << "', got no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), component) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected Error(\"" << component << "\", ...), got a " << typeid(e).name() << ": " << e.what();
  }
}

// An entry built field by field, in the container format of docs/format.md, with a correct
// length, field count and checksum: what an attacker who read the format can write.
using Fields = std::vector<std::pair<std::string, std::string>>;

template <typename T>
void put(std::string& out, T x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof x);
}

std::string make_entry(const Fields& fields) {
  std::string payload;
  for (const auto& [name, data] : fields) {
    put<uint32_t>(payload, static_cast<uint32_t>(name.size()));
    payload += name;
    put<uint64_t>(payload, data.size());
    payload += data;
  }
  std::string out = "UPDRAFTE";
  put<uint32_t>(out, kEntryFormatVersion);
  put<uint32_t>(out, static_cast<uint32_t>(fields.size()));
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, xxh3_64(payload.data(), payload.size()));
  return out + payload;
}

const char* kNoInit = "graph() {\n  return ()\n}\n";

Fields base_fields(const std::string& graph, const std::string& init = kNoInit) {
  return {{"key", "k"},     {"note", "crafted"}, {"engine", kEngineVersion}, {"cpu", cpu_features()},
          {"graph", graph}, {"init", init},      {"fingerprints", ""}};
}

std::string fingerprint_line(int j, const Tensor& t) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "p%d %016llx\n", j, static_cast<unsigned long long>(xxh3_64(t.data(), t.nbytes())));
  return buf;
}

}  // namespace

// ---- item 4: the text IR parser's sizes ----

TEST(HardeningParse, ConstantWhoseByteCountWrapsIsAParseError) {
  // 2^62 + 1 f32 elements: numel * 4 wraps to 4 bytes, and full() then wrote 2^62 elements
  // into a 64-byte allocation.
  expect_error([] { parse_graph("graph() {\n  %c = constant f32[4611686018427387905] full(1.0)\n  return (%c)\n}"); },
               "parse", "overflows");
  // 3037000500^2 > INT64_MAX: the element count itself does not fit.
  expect_error([] { parse_graph("graph() {\n  %c = constant i64[3037000500, 3037000500] full(1)\n  return (%c)\n}"); },
               "parse", "overflows");
}

// Found by fuzz_text_ir (session 31): a reshape target whose static sizes multiply past int64
// overflowed the shape function's element count (UBSan: signed-integer-overflow). It is an
// error naming the overflow now, whether the sizes are all static or beside a symbol.
TEST(HardeningParse, ReshapeTargetWhoseSizesOverflowIsAnError) {
  for (const char* shape : {"[s0, 4207383333333333333, 64]", "[4207383333333333333, 64]", "[-1, 4207383333333333333, 64]"}) {
    SCOPED_TRACE(shape);
    expect_error([&] {
      parse_graph(std::string("graph(%x: f32[s0, 4]) {\n  %0 = reshape(%x) {shape=") + shape + "}\n  return (%0)\n}");
    }, "parse", "overflows");
  }
}

// Found by fuzz_text_ir (issue 16's campaign): lo far above 2^62 with the default hi passed the
// bounds check (it tested lo >= -2^62 and hi <= 2^62 only), and floor(x) of ~7.8e37 was
// converted to int64 (UBSan: float-cast-overflow). Each bound must be within +-2^62.
TEST(HardeningParse, RandomBoundsOfAnIntegerConstantAreEachInRange) {
  for (const char* bounds : {"lo=77777777777777777777777777777777777777.0", "hi=-77777777777777777777777777777777777777.0",
                             "lo=1e19, hi=0", "lo=0, hi=inf", "lo=nan"}) {
    for (const char* dt : {"i64", "i32", "u8"}) {
      SCOPED_TRACE(std::string(dt) + " " + bounds);
      expect_error([&] { parse_graph(std::string("graph() {\n  %c = constant ") + dt + "[4] random(seed=4, " + bounds +
                                     ")\n  return (%c)\n}"); },
                   "parse", "within +-2^62");
    }
  }
  // At the edges, and reversed, it fills.
  auto g = parse_graph("graph() {\n  %c = constant i64[64] random(seed=4, lo=4611686018427387904.0, hi=-4611686018427387904.0)\n  return (%c)\n}");
  const int64_t* v = g->outputs()[0]->constant->ptr<int64_t>();
  for (int i = 0; i < 64; ++i) EXPECT_LE(std::abs(v[i]), int64_t{1} << 62);
}

TEST(HardeningParse, NegativeSizesAreParseErrors) {
  // [-2, -2] has 4 elements by product: it was accepted and kernels saw negative sizes.
  expect_error([] { parse_graph("graph() {\n  %c = constant f32[-2, -2] [1.0, 2.0, 3.0, 4.0]\n  return (%c)\n}"); },
               "parse", "negative");
  expect_error([] { parse_graph("graph(%x: f32[-1, 3]) {\n  return (%x)\n}"); }, "parse", "negative");
  expect_error([] { parse_graph("graph(%x: f32[(2-5)]) {\n  return (%x)\n}"); }, "parse", "negative");
}

TEST(HardeningParse, TensorRejectsNegativeAndOverflowingShapes) {
  expect_error([] { Tensor t(DType::f32, {-2, -2}); }, "tensor", "negative");
  expect_error([] { Tensor t(DType::f32, {int64_t{1} << 62, 4}); }, "tensor", "overflows");
  EXPECT_EQ(Tensor(DType::f32, {0, int64_t{1} << 62, 4}).numel(), 0);  // empty, as in torch
}

// ---- item 5: a stored tensor whose byte size wraps ----

TEST(HardeningParse, StoredTensorWhoseByteSizeWrapsIsACacheError) {
  // The header says 2^62 + 1 f32 elements, whose byte count wraps to the 4 bytes stored: the
  // size check passed and the tensor's readers ran 2^64 bytes past its end.
  Tensor p(DType::f32, {1});
  std::string wrapped = std::string("f32 4611686018427387905\n") + std::string(4, '\0');
  Fields f = base_fields("graph() {\n  %d = constant f32[4611686018427387905] extern(d0)\n  return (%d)\n}");
  f[6].second = fingerprint_line(0, p);
  f.push_back({"d0", wrapped});
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {p}); }, "cache", "entry field d0");
}

TEST(HardeningParse, StoredTensorWithANegativeSizeIsACacheError) {
  Tensor p(DType::f32, {1});
  Fields f = base_fields("graph() {\n  %d = constant f32[2] extern(d0)\n  return (%d)\n}");
  f[6].second = fingerprint_line(0, p);
  f.push_back({"d0", "f32 -1 -2\n" + std::string(8, '\0')});
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {p}); }, "cache", "entry field d0");
}

// ---- item 6: INT64_MIN // -1 ----

TEST(HardeningParse, ShapeExpressionOverflowIsAnError) {
  // x86 raises SIGFPE for INT64_MIN / -1. The parser reports where: "[parse] line 1, col ..".
  expect_error([] { parse_dim("(-9223372036854775808)//(-1)"); }, "parse", "overflows");
  expect_error([] { parse_dim("9223372036854775807+1"); }, "parse", "overflows");
  expect_error([] { parse_dim("(-9223372036854775807)-2"); }, "parse", "overflows");
  expect_error([] { parse_dim("4611686018427387904*2"); }, "parse", "overflows");
  expect_error([] { parse_dim("s0+9223372036854775807+1"); }, "parse", "overflows");
  expect_error([] { parse_dim("s0-(-9223372036854775808)"); }, "parse", "overflows");
  // Symbolic until bound: the overflow is found when the expression is evaluated.
  Dim d = parse_dim("s0//(-1)");
  expect_error([&] { d.eval({{"s0", INT64_MIN}}); }, "ir", "overflows");
  EXPECT_EQ(d.eval({{"s0", 6}}), -6);
  EXPECT_EQ(parse_dim("(-7)//2").value(), -4);
  EXPECT_EQ(parse_dim("(-7)%2").value(), 1);
  EXPECT_EQ(parse_dim("7%(-2)").value(), -1);
  // Python's answers, where a - (a // b) * b overflows on the way (found by fuzz_dim).
  EXPECT_EQ(parse_dim("(-9223372036854775808)%(-1)").value(), 0);
  EXPECT_EQ(parse_dim("1%(-9223372036854775808)").value(), -9223372036854775807);
  EXPECT_EQ(parse_dim("(-2305843009213693952)%(-4)").value(), 0);
}

TEST(HardeningParse, ShapeExpressionOverflowInAnEntryIsAnError) {
  Fields f = base_fields("graph(%x: f32[((-9223372036854775808)//(-1))]) {\n  return (%x)\n}");
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {}); }, "parse", "overflows");
}

TEST(HardeningParse, DeeplyNestedShapeExpressionIsAnError) {
  // Recursion depth is bounded by the text, not the stack.
  std::string deep(100000, '(');
  expect_error([&] { parse_dim(deep + "1" + std::string(100000, ')')); }, "parse", "nest");
  std::string chain = "s0";
  for (int i = 0; i < 100000; ++i) chain += "+s0";
  expect_error([&] { parse_dim(chain); }, "parse", "operators");
}

// ---- item 7: an exception leaving load_buffer while the checksum thread runs ----

TEST(HardeningParse, LargeEntryWithABadFingerprintLineIsACacheError) {
  // 8 MiB of payload puts the checksum on its own thread; std::stoul's out_of_range left
  // load_buffer with that thread still joinable: std::terminate.
  Tensor p(DType::f32, {1});
  Fields f = base_fields("graph() {\n  return ()\n}");
  f[6].second = "p99999999999999999999999 0123456789abcdef\n";
  f.push_back({"d0", "f32 1\n" + std::string(4, '\0')});
  f.push_back({"padding", std::string(size_t{9} << 20, 'x')});
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {p}); }, "cache", "p99999999999999999999999");
  // And a corrupt one is reported as corrupt, after the checksum, whatever else is wrong.
  std::string bad = e;
  bad[bad.size() - 1] ^= 1;
  expect_error([&] { load_entry(bad, "k", {p}); }, "cache", "checksum mismatch");
}

TEST(HardeningParse, HugeFoldedConstantReferenceIsACacheError) {
  Fields f = base_fields("graph() {\n  %d = constant f32[1] extern(d99999999999999999999999)\n  return (%d)\n}");
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {}); }, "parse", "d99999999999999999999999");
}

// ---- item 8: allocations bounded by what the entry can justify ----

TEST(HardeningParse, EntryCannotAskForMoreConstantDataThanItHolds) {
  // One literal value for 2^40 elements (4 TiB): the constant was allocated (and zeroed) at its
  // full size before the values were counted.
  Fields f = base_fields("graph() {\n  %c = constant f32[1099511627776] [0.0]\n  return (%c)\n}");
  std::string e = make_entry(f);
  EXPECT_LT(e.size(), 1024u);
  expect_error([&] { load_entry(e, "k", {}); }, "parse", "more values than");
  // Generated data (full, random) has no bytes in the entry at all: an entry holds its
  // constants by reference (extern) only.
  Fields g = base_fields("graph() {\n  %c = constant f32[1073741824] full(0)\n  return (%c)\n}");
  std::string e2 = make_entry(g);
  expect_error([&] { load_entry(e2, "k", {}); }, "parse", "extern");
}

TEST(HardeningParse, ReplayedFoldCannotGrowBeyondWhatAFoldRecords) {
  // The init graph expands a one-element stored tensor to 2^30 elements (4 GiB): replaying
  // it allocated the whole result. A recorded fold never grows past 2x its inputs (or 4 KiB).
  Fields f = base_fields("graph() {\n  %d = constant f32[1073741824] extern(d0)\n  return (%d)\n}",
                         "graph() {\n  %b = constant f32[1] extern(b0)\n"
                         "  %0 = expand(%b) {shape=[1073741824]}\n  return (%0)\n}");
  f.push_back({"b0", "f32 1\n" + std::string(4, '\0')});
  std::string e = make_entry(f);
  expect_error([&] { load_entry(e, "k", {}); }, "cache", "fold");
}

// ---- item 13: a large expand's byte counts in the plan ----

TEST(HardeningParse, PlanWithOverflowingByteCountIsAnError) {
  // expand to 2^62 + 1 elements, summed to one: the intermediate's bytes wrapped to 4 and the
  // kernel wrote 2^64 bytes into them.
  auto g = parse_graph(
      "graph(%x: f32[1]) {\n  %0 = expand(%x) {shape=[4611686018427387905]}\n"
      "  %1 = sum(%0) {dims=[0]}\n  return (%1)\n}");
  auto cg = Executable::compile(std::move(g), CompileOptions{});
  expect_error(
      [&] {
        auto outs = cg->prepare({{1}});
        Tensor x(DType::f32, {1}), y(DType::f32, outs[0]);
        cg->run({x.view()}, {y.view()});
      },
      "plan", "overflows");
  // Within int64 elements but past int64 bytes: 2^61 f32 elements.
  auto g2 = parse_graph(
      "graph(%x: f32[1]) {\n  %0 = expand(%x) {shape=[2305843009213693952]}\n"
      "  %1 = sum(%0) {dims=[0]}\n  return (%1)\n}");
  auto cg2 = Executable::compile(std::move(g2), CompileOptions{});
  expect_error([&] { cg2->prepare({{1}}); }, "plan", "overflows");
}
