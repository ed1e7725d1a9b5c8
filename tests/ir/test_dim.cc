#include <gtest/gtest.h>

#include "compiler/ir/dim.h"

namespace modelc {

TEST(Dim, ArithmeticAndPrinting) {
  Dim B = Dim::symbol("B"), T = Dim::symbol("T");
  EXPECT_EQ((B * T + B * 2 + 1).str(), "B*T+2*B+1");
  EXPECT_EQ((B * 4).str(), "4*B");
  EXPECT_EQ((B - B).str(), "0");
  EXPECT_TRUE((B - B).is_const());
  EXPECT_EQ(B * T, T * B);
  EXPECT_NE(B, T);
  EXPECT_EQ(Dim(3) + Dim(4), Dim(7));
  EXPECT_EQ((-B).str(), "-B");
}

TEST(Dim, ExactDivision) {
  Dim B = Dim::symbol("B"), T = Dim::symbol("T");
  EXPECT_EQ(*Dim::divide(B * T * 6, T * 3), B * 2);
  EXPECT_EQ(*Dim::divide(Dim(192), Dim(6)), Dim(32));
  EXPECT_FALSE(Dim::divide(Dim(10), Dim(3)));
  EXPECT_FALSE(Dim::divide(B, Dim(2)));
  EXPECT_FALSE(Dim::divide(B, Dim(0)));
  EXPECT_EQ(*Dim::divide(B + T, B + T), Dim(1));
}

TEST(Dim, EvaluateAndSubstitute) {
  Dim B = Dim::symbol("B"), T = Dim::symbol("T");
  Dim d = B * T + 3;
  EXPECT_EQ(*d.evaluate({{"B", 2}, {"T", 5}}), 13);
  EXPECT_FALSE(d.evaluate({{"B", 2}}));
  EXPECT_EQ(d.substitute({{"T", Dim(4)}}), B * 4 + 3);
}

TEST(Dim, OverflowThrowsInsteadOfWrapping) {
  Dim B = Dim::symbol("B");
  Dim big(int64_t{1} << 62);
  EXPECT_THROW(big * 4, DimOverflow);
  EXPECT_THROW(B * big * 4, DimOverflow);
  EXPECT_THROW(big + big, DimOverflow);
  EXPECT_THROW(-Dim(INT64_MIN), DimOverflow);
  EXPECT_THROW((B * big).evaluate({{"B", 4}}), DimOverflow);
  EXPECT_FALSE(Dim::divide(Dim(INT64_MIN), Dim(-1)));
  EXPECT_EQ(*Dim::divide(Dim(6), Dim(-1)), Dim(-6));
}

}  // namespace modelc
