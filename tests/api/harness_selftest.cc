// Checks of the test harness itself (codecs, input patterns), so a collective
// failure can be trusted to be the library's. Needs no communicator.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/collective_case.h"
#include "harness/datatypes.h"

namespace chorus_test {
namespace {

TEST(HarnessCodecs, KnownBitPatterns) {
  EXPECT_EQ(encodeHalf(1.0), 0x3C00);
  EXPECT_EQ(encodeHalf(-2.0), 0xC000);
  EXPECT_EQ(encodeHalf(65504.0), 0x7BFF);
  EXPECT_EQ(encodeHalf(1e6), 0x7C00);                         // overflow to +inf
  EXPECT_EQ(encodeHalf(std::ldexp(1.0, -24)), 0x0001);        // smallest subnormal
  EXPECT_EQ(encodeHalf(1.0 + std::ldexp(1.0, -11)), 0x3C00);  // tie rounds to even
  EXPECT_EQ(encodeBfloat16(1.0), 0x3F80);
  EXPECT_EQ(encodeBfloat16(-3.0), 0xC040);
  EXPECT_EQ(encodeFp8E4M3(1.0), 0x38);
  EXPECT_EQ(encodeFp8E4M3(448.0), 0x7E);
  EXPECT_EQ(encodeFp8E4M3(-0.75), 0xB4);
  EXPECT_EQ(encodeFp8E4M3(1000.0), 0x7F);  // no inf in e4m3: NaN
  EXPECT_EQ(encodeFp8E5M2(1.0), 0x3C);
  EXPECT_EQ(encodeFp8E5M2(57344.0), 0x7B);
  EXPECT_EQ(encodeFp8E5M2(1e6), 0x7C);
  EXPECT_DOUBLE_EQ(decodeFp8E4M3(0x01), std::ldexp(1.0, -9));
  EXPECT_DOUBLE_EQ(decodeFp8E5M2(0x01), std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isnan(decodeFp8E4M3(0xFF)));
  EXPECT_TRUE(std::isnan(decodeHalf(0xFFFF)));
  EXPECT_TRUE(std::isnan(decodeBfloat16(0xFFFF)));
}

TEST(HarnessCodecs, EveryEncodingRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    double half = decodeHalf(static_cast<uint16_t>(bits));
    if (!std::isnan(half)) {
      EXPECT_EQ(encodeHalf(half), bits) << std::hex << bits;
    }
    double bf16 = decodeBfloat16(static_cast<uint16_t>(bits));
    if (!std::isnan(bf16)) {
      EXPECT_EQ(encodeBfloat16(bf16), bits) << std::hex << bits;
    }
  }
  for (uint32_t bits = 0; bits < 0x100; ++bits) {
    double e4m3 = decodeFp8E4M3(static_cast<uint8_t>(bits));
    if (!std::isnan(e4m3)) {
      EXPECT_EQ(encodeFp8E4M3(e4m3), bits) << std::hex << bits;
    }
    double e5m2 = decodeFp8E5M2(static_cast<uint8_t>(bits));
    if (!std::isnan(e5m2)) {
      EXPECT_EQ(encodeFp8E5M2(e5m2), bits) << std::hex << bits;
    }
  }
}

// Every partial sum (in any order) of the inputs must be exact in the type, and
// products must stay within int8 and fp8: that is what makes exact checks fair.
TEST(HarnessInputs, PartialResultsAreExactInEveryType) {
  for (const DataTypeTraits& traits : allDataTypes()) {
    for (int nranks : {1, 2, 3, 4, 8}) {
      for (OpKind op : allOpKinds()) {
        CollectiveCase testCase{Collective::kAllReduce, traits.type, op, 4096, false, 0, 7};
        InputPattern inputs(testCase, nranks);
        double scalar =
            (op == OpKind::kPreMulSumImmediate || op == OpKind::kPreMulSumDevice) && !traits.isFloat ? 3 : 1;
        bool sawNonZero = false;
        for (size_t i = 0; i < 4096; ++i) {
          double sumOfMagnitudes = 0, productMagnitude = 1;
          for (int rank = 0; rank < nranks; ++rank) {
            double x = inputs.value(rank, i);
            ASSERT_EQ(x, std::trunc(x));
            ASSERT_LE(std::fabs(x), 8) << "fillInputs encodes only integers in [-8, 8]";
            if (!traits.isSigned) {
              ASSERT_GE(x, 0);
            }
            sawNonZero |= x != 0;
            sumOfMagnitudes += std::fabs(x) * scalar;
            productMagnitude *= std::fabs(x);
          }
          if (op != OpKind::kProd) {
            ASSERT_LE(sumOfMagnitudes, traits.exactIntLimit) << traits.name << " " << opKindName(op) << " n=" << nranks;
          }
          if (op == OpKind::kProd) {
            ASSERT_LE(productMagnitude, 4);
          }
        }
        EXPECT_TRUE(sawNonZero);
      }
    }
  }
}

}  // namespace
}  // namespace chorus_test
