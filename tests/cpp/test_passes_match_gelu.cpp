// match_gelu: GELU's tanh formula spelled out in elementwise ops becomes one gelu op.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/match_gelu.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// GPT-2's NewGELUActivation as AOTAutograd decomposes it; `order` swaps commutative operands.
std::string gelu_new(bool swapped, const char* c2 = "0.7978845608028654") {
  std::string a = swapped ? "%c05, %x" : "%x, %c05";
  std::string s = R"(graph(%x: f32[s0, 16]) {
  %c05 = constant f32[] full(0.5)
  %c1 = constant f32[] full(1.0)
  %c044 = constant f32[] full(0.044715)
  %c2 = constant f32[] full()" + std::string(c2) + R"()
  %0 = mul()" + a + R"()
  %1 = pow_scalar(%x) {exponent=3.0}
  %2 = mul(%1, %c044)
  %3 = add()" + (swapped ? "%2, %x" : "%x, %2") + R"()
  %4 = mul()" + (swapped ? "%c2, %3" : "%3, %c2") + R"()
  %5 = tanh(%4)
  %6 = add()" + (swapped ? "%c1, %5" : "%5, %c1") + R"()
  %7 = mul()" + (swapped ? "%6, %0" : "%0, %6") + R"()
  return (%7)
})";
  return s;
}

}  // namespace

TEST(PassMatchGelu, TanhFormulaBecomesOneOp) {
  for (bool swapped : {false, true}) {
    SCOPED_TRACE(swapped);
    auto g = check_pass(gelu_new(swapped), then_dce<match_gelu>, Changed::yes, {{"s0", 3}}, 1e-5, 1e-6);
    ASSERT_EQ(ops_of(*g), "gelu");
    EXPECT_EQ(g->nodes()[0]->attr("approximate").s(), "tanh");
  }
}

TEST(PassMatchGelu, OtherConstantsAreNotGelu) {
  check_pass(gelu_new(false, "0.8"), match_gelu, Changed::no, {{"s0", 3}});
}
