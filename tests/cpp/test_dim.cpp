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
