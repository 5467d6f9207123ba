#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/dim.h"

using namespace updraft;

TEST(Dim, FoldsConstants) {
  EXPECT_EQ((Dim(3) + 4).value(), 7);
  EXPECT_EQ(floordiv(Dim(-7), Dim(2)).value(), -4);
  EXPECT_EQ(mod(Dim(-7), Dim(2)).value(), 1);
}

TEST(Dim, SymbolicEvaluates) {
  Dim s = Dim::sym("s0");
  Dim e = floordiv(s * 2 + 1, Dim(3));
  EXPECT_FALSE(e.is_static());
  EXPECT_EQ(e.eval({{"s0", 4}}), 3);
  EXPECT_EQ(e.str(), "(((s0*2)+1)//3)");
  EXPECT_THROW(e.value(), Error);
  EXPECT_THROW(e.eval({}), Error);
}

TEST(Dim, IdentitiesAndEquality) {
  Dim s = Dim::sym("s0");
  EXPECT_EQ(s * 1, s);
  EXPECT_EQ(s + 0, s);
  EXPECT_EQ((s * 0).value(), 0);
  EXPECT_EQ(s * 2, Dim::sym("s0") * 2);
  EXPECT_NE(s * 2, s * 3);
  std::vector<std::string> syms;
  (s * Dim::sym("s1") + s).collect_symbols(syms);
  EXPECT_EQ(syms, (std::vector<std::string>{"s0", "s1"}));
}

TEST(Dim, ConstantOffsetsGather) {
  Dim s = Dim::sym("s0");
  // A 3x3 window with padding 1 and stride 1 keeps the size: ((s0+2)-3)+1 is s0.
  EXPECT_EQ(((s + 2) - 3) + 1, s);
  EXPECT_EQ(((s - 1) + 4).str(), "(s0+3)");
  EXPECT_EQ((Dim(5) + s).str(), "(s0+5)");
  EXPECT_EQ(((s + 1) - 4).str(), "(s0-3)");
  EXPECT_EQ(((s + 1) - 4).eval({{"s0", 10}}), 7);
  // Two stride-2 windows reached by different paddings give one expression.
  Dim a = floordiv((s + 2) - 3, Dim(2)) + 1, b = floordiv(s - 1, Dim(2)) + 1;
  EXPECT_EQ(a, b);
  EXPECT_EQ(Dim(7) - s, Dim(7) - Dim::sym("s0"));  // a constant minus a symbol is left alone
}
