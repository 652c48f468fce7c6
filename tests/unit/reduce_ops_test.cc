// Reduction operators: every kind on every element type, integer wraparound,
// NaN handling, the pre/post steps of PreMulSum and SumPostDiv, and the array
// loops the CPU executor runs.
#include "device/common/reduce_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace chorus {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T, RedKind K>
T reduceOnce(T a, T b, T scalar = T{}, int divisor = 1) {
  return RedOp<T, K>{scalar, divisor}.reduce(a, b);
}

// ---- integers ----

TEST(ReduceOpsTest, IntegerSumWraps) {
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Sum>(127, 1)), -128);
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Sum>(-128, -1)), 127);
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Sum>(255, 1)), 0);
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Sum>(200, 100)), 44);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Sum>(INT32_MAX, 1)), INT32_MIN);
  EXPECT_EQ((reduceOnce<uint32_t, RedKind::Sum>(UINT32_MAX, 2)), 1u);
  EXPECT_EQ((reduceOnce<int64_t, RedKind::Sum>(INT64_MAX, 1)), INT64_MIN);
  EXPECT_EQ((reduceOnce<uint64_t, RedKind::Sum>(UINT64_MAX, 1)), 0u);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Sum>(-5, 3)), -2);
}

TEST(ReduceOpsTest, IntegerProdWraps) {
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Prod>(200, 2)), 144);
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Prod>(255, 255)), 1);
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Prod>(100, 3)), 44);
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Prod>(-128, -1)), -128);
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Prod>(-3, 5)), -15);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Prod>(0x40000000, 2)), INT32_MIN);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Prod>(65536, 65536)), 0);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Prod>(INT32_MIN, -1)), INT32_MIN);
  EXPECT_EQ((reduceOnce<uint32_t, RedKind::Prod>(UINT32_MAX, UINT32_MAX)), 1u);
  EXPECT_EQ((reduceOnce<int64_t, RedKind::Prod>(int64_t(1) << 62, 4)), 0);
  EXPECT_EQ((reduceOnce<int64_t, RedKind::Prod>(INT64_MIN, -1)), INT64_MIN);
  EXPECT_EQ((reduceOnce<uint64_t, RedKind::Prod>(UINT64_MAX, UINT64_MAX)), 1u);
}

TEST(ReduceOpsTest, IntegerMaxMinRespectSignedness) {
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Max>(-1, 1)), 1);
  EXPECT_EQ((reduceOnce<int8_t, RedKind::Min>(-1, 1)), -1);
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Max>(255, 1)), 255);
  EXPECT_EQ((reduceOnce<uint8_t, RedKind::Min>(255, 1)), 1);
  EXPECT_EQ((reduceOnce<int32_t, RedKind::Max>(INT32_MIN, -7)), -7);
  EXPECT_EQ((reduceOnce<uint32_t, RedKind::Max>(0x80000000u, 1)), 0x80000000u);
  EXPECT_EQ((reduceOnce<int64_t, RedKind::Min>(INT64_MIN, INT64_MAX)), INT64_MIN);
  EXPECT_EQ((reduceOnce<uint64_t, RedKind::Min>(UINT64_MAX, 3)), 3u);
}

TEST(ReduceOpsTest, SumPostDivTruncatesTowardZero) {
  // ncclAvg for integers: the wrapped sum, then C division.
  EXPECT_EQ((RedOp<int32_t, RedKind::SumPostDiv>{0, 2}.post(7)), 3);
  EXPECT_EQ((RedOp<int32_t, RedKind::SumPostDiv>{0, 2}.post(-7)), -3);
  EXPECT_EQ((RedOp<int32_t, RedKind::SumPostDiv>{0, 3}.post(-2)), 0);
  EXPECT_EQ((RedOp<int8_t, RedKind::SumPostDiv>{0, 3}.post(-128)), -42);
  EXPECT_EQ((RedOp<int8_t, RedKind::SumPostDiv>{0, 200}.post(-128)), 0);  // divisor wider than int8
  EXPECT_EQ((RedOp<uint8_t, RedKind::SumPostDiv>{0, 200}.post(255)), 1);
  EXPECT_EQ((RedOp<uint8_t, RedKind::SumPostDiv>{0, 2}.post(255)), 127);
  EXPECT_EQ((RedOp<uint32_t, RedKind::SumPostDiv>{0, 3}.post(UINT32_MAX)), 1431655765u);
  EXPECT_EQ((RedOp<int64_t, RedKind::SumPostDiv>{0, 3}.post(INT64_MIN)), -3074457345618258602);
  EXPECT_EQ((RedOp<uint64_t, RedKind::SumPostDiv>{0, 2}.post(UINT64_MAX)), UINT64_MAX / 2);
  // A whole average of {-3, -2, -2} over 3 ranks.
  RedOp<int32_t, RedKind::SumPostDiv> avg{0, 3};
  EXPECT_EQ(avg.post(avg.reduce(avg.reduce(-3, -2), -2)), -2);
  EXPECT_EQ(avg.pre(-3), -3);
  // The sum wraps before the division, as NCCL's does: int8 4 x 100 = 400 = -112 (mod 256).
  RedOp<int8_t, RedKind::SumPostDiv> avg8{0, 4};
  int8_t sum = avg8.reduce(avg8.reduce(100, 100), avg8.reduce(100, 100));
  EXPECT_EQ(sum, -112);
  EXPECT_EQ(avg8.post(sum), -28);
}

TEST(ReduceOpsTest, PreMulSumMultipliesOnlyInPre) {
  RedOp<int32_t, RedKind::PreMulSum> op{3, 0};
  EXPECT_EQ(op.pre(5), 15);
  EXPECT_EQ(op.reduce(5, 6), 11);
  EXPECT_EQ(op.post(5), 5);
  EXPECT_EQ((RedOp<int8_t, RedKind::PreMulSum>{2, 0}.pre(100)), -56);  // wraps
  EXPECT_EQ((RedOp<float, RedKind::PreMulSum>{0.25f, 0}.pre(8.0f)), 2.0f);
  EXPECT_EQ((RedOp<double, RedKind::PreMulSum>{1.0 / 3, 0}.pre(3.0)), 1.0);
  // Half: 1/3 rounds to 0x3555 = 0.333251953125. Times 3 = 0.999755859375, a tie
  // between 0x3bff and 1.0: to even, 1.0. Times 5 = 1.666259765625 -> 1.666015625.
  RedOp<Half, RedKind::PreMulSum> halfOp{fromFloat<Half>(1.0f / 3), 0};
  EXPECT_EQ(halfOp.scalar.bits, 0x3555);
  EXPECT_EQ(halfOp.pre(fromFloat<Half>(3.0f)).bits, 0x3c00);
  EXPECT_EQ(halfOp.pre(fromFloat<Half>(5.0f)).bits, 0x3eaa);
  RedOp<Fp8E4M3, RedKind::PreMulSum> fp8Op{fromFloat<Fp8E4M3>(0.5f), 0};
  EXPECT_EQ(fp8Op.pre(fromFloat<Fp8E4M3>(448.0f)).bits, fromFloat<Fp8E4M3>(224.0f).bits);
}

static_assert(RedOp<float, RedKind::PreMulSum>::kHasPre && !RedOp<float, RedKind::PreMulSum>::kHasPost);
static_assert(!RedOp<int32_t, RedKind::SumPostDiv>::kHasPre && RedOp<int32_t, RedKind::SumPostDiv>::kHasPost);
static_assert(!RedOp<Half, RedKind::Sum>::kHasPre && !RedOp<Half, RedKind::Sum>::kHasPost);
static_assert(!RedOp<int8_t, RedKind::Max>::kHasPre && !RedOp<int8_t, RedKind::Min>::kHasPost);

// ---- float and double ----

TEST(ReduceOpsTest, FloatArithmetic) {
  EXPECT_EQ((reduceOnce<float, RedKind::Sum>(1.5f, 2.25f)), 3.75f);
  EXPECT_EQ((reduceOnce<float, RedKind::Prod>(1.5f, -2.0f)), -3.0f);
  EXPECT_EQ((reduceOnce<float, RedKind::Max>(-1.0f, -2.0f)), -1.0f);
  EXPECT_EQ((reduceOnce<float, RedKind::Min>(-1.0f, -2.0f)), -2.0f);
  EXPECT_EQ((reduceOnce<double, RedKind::Sum>(0.1, 0.2)), 0.1 + 0.2);
  EXPECT_EQ((reduceOnce<double, RedKind::Prod>(1e200, 1e200)), std::numeric_limits<double>::infinity());
  EXPECT_EQ((reduceOnce<double, RedKind::Max>(-kInf, 3.0)), 3.0);
  EXPECT_EQ((reduceOnce<double, RedKind::Min>(-kInf, 3.0)), -kInf);
}

// Max and Min of two values, and whether two values have the same bits.
template <typename T>
T maxOf(T a, T b) {
  return reduceOnce<T, RedKind::Max>(a, b);
}
template <typename T>
T minOf(T a, T b) {
  return reduceOnce<T, RedKind::Min>(a, b);
}
template <typename T>
bool sameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// fmaxf/fminf semantics: a NaN loses against a number, from either side.
template <typename T>
void expectNaNLosesMaxMin(T nan, T one, T two) {
  EXPECT_TRUE(sameBits(maxOf(nan, one), one));
  EXPECT_TRUE(sameBits(maxOf(one, nan), one));
  EXPECT_TRUE(sameBits(minOf(nan, two), two));
  EXPECT_TRUE(sameBits(minOf(two, nan), two));
  EXPECT_TRUE(sameBits(maxOf(one, two), two));
  EXPECT_TRUE(sameBits(maxOf(two, one), two));
  EXPECT_TRUE(sameBits(minOf(one, two), one));
  EXPECT_TRUE(sameBits(minOf(two, one), one));
  EXPECT_TRUE(sameBits(maxOf(nan, nan), nan));
  EXPECT_TRUE(sameBits(minOf(nan, nan), nan));
}

TEST(ReduceOpsTest, MaxMinIgnoreNaNLikeFmax) {
  expectNaNLosesMaxMin<float>(kNaN, 1.0f, 2.0f);
  expectNaNLosesMaxMin<double>(std::numeric_limits<double>::quiet_NaN(), 1.0, 2.0);
  expectNaNLosesMaxMin<Half>(Half{0x7e00}, fromFloat<Half>(1.0f), fromFloat<Half>(2.0f));
  expectNaNLosesMaxMin<BFloat16>(BFloat16{0x7fc0}, fromFloat<BFloat16>(1.0f), fromFloat<BFloat16>(2.0f));
  expectNaNLosesMaxMin<Fp8E4M3>(Fp8E4M3{0x7f}, fromFloat<Fp8E4M3>(1.0f), fromFloat<Fp8E4M3>(2.0f));
  expectNaNLosesMaxMin<Fp8E5M2>(Fp8E5M2{0x7f}, fromFloat<Fp8E5M2>(1.0f), fromFloat<Fp8E5M2>(2.0f));
}

// Of two zeros Max takes +0 and Min -0 from either side, so ranks that combine the same
// values in different orders get the same bits.
template <typename T>
void expectZeroSignIsOrderFree(T plus, T minus) {
  EXPECT_TRUE(sameBits(maxOf(plus, minus), plus));
  EXPECT_TRUE(sameBits(maxOf(minus, plus), plus));
  EXPECT_TRUE(sameBits(minOf(plus, minus), minus));
  EXPECT_TRUE(sameBits(minOf(minus, plus), minus));
  EXPECT_TRUE(sameBits(maxOf(minus, minus), minus));
  EXPECT_TRUE(sameBits(minOf(plus, plus), plus));
}

TEST(ReduceOpsTest, MaxMinOfZerosDoNotDependOnOrder) {
  expectZeroSignIsOrderFree<float>(0.0f, -0.0f);
  expectZeroSignIsOrderFree<double>(0.0, -0.0);
  expectZeroSignIsOrderFree<Half>(Half{0x0000}, Half{0x8000});
  expectZeroSignIsOrderFree<BFloat16>(BFloat16{0x0000}, BFloat16{0x8000});
  expectZeroSignIsOrderFree<Fp8E4M3>(Fp8E4M3{0x00}, Fp8E4M3{0x80});
  expectZeroSignIsOrderFree<Fp8E5M2>(Fp8E5M2{0x00}, Fp8E5M2{0x80});
}

// ---- 16- and 8-bit floats: through float, rounded once ----

TEST(ReduceOpsTest, HalfArithmeticIsCorrectlyRounded) {
  auto h = [](float f) { return fromFloat<Half>(f); };
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(h(1.0f), h(2.0f))).bits, 0x4200);  // 3
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even.
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(h(1.0f), h(std::ldexp(1.0f, -11)))).bits, 0x3c00);
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(Half{0x3c01}, h(std::ldexp(1.0f, -11)))).bits, 0x3c02);
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(h(65504.0f), h(65504.0f))).bits, 0x7c00);    // overflow: inf
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(Half{0x8000}, Half{0x8000})).bits, 0x8000);  // -0 + -0
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(Half{0x0001}, Half{0x0001})).bits, 0x0002);  // subnormals
  EXPECT_EQ((reduceOnce<Half, RedKind::Prod>(h(3.0f), h(-0.5f))).bits, 0xbe00);          // -1.5
  EXPECT_EQ((reduceOnce<Half, RedKind::Prod>(h(std::ldexp(1.0f, -12)), h(std::ldexp(1.0f, -13)))).bits,
            0x0000);  // 2^-25 is a tie with 0
  EXPECT_EQ((reduceOnce<Half, RedKind::Max>(h(-3.0f), h(-4.0f))).bits, h(-3.0f).bits);
  EXPECT_EQ((reduceOnce<Half, RedKind::Min>(h(-3.0f), h(-4.0f))).bits, h(-4.0f).bits);
  EXPECT_EQ((reduceOnce<Half, RedKind::Sum>(Half{0x7e00}, h(1.0f))).bits, 0x7fff);  // NaN stays NaN
}

TEST(ReduceOpsTest, BFloat16Arithmetic) {
  auto b = [](float f) { return fromFloat<BFloat16>(f); };
  EXPECT_EQ((reduceOnce<BFloat16, RedKind::Sum>(b(256.0f), b(1.0f))).bits, 0x4380);  // 257 ties to 256
  EXPECT_EQ((reduceOnce<BFloat16, RedKind::Sum>(b(256.0f), b(3.0f))).bits, 0x4382);  // 259 ties to 260
  EXPECT_EQ((reduceOnce<BFloat16, RedKind::Prod>(b(1.5f), b(1.5f))).bits, b(2.25f).bits);
  EXPECT_EQ((reduceOnce<BFloat16, RedKind::Max>(b(-1.0f), b(0.5f))).bits, b(0.5f).bits);
  EXPECT_EQ((reduceOnce<BFloat16, RedKind::Min>(b(-1.0f), b(0.5f))).bits, b(-1.0f).bits);
}

TEST(ReduceOpsTest, Fp8ArithmeticSaturates) {
  auto e4 = [](float f) { return fromFloat<Fp8E4M3>(f); };
  auto e5 = [](float f) { return fromFloat<Fp8E5M2>(f); };
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Sum>(e4(240.0f), e4(16.0f))).bits, 0x78);  // 256
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Sum>(e4(448.0f), e4(448.0f))).bits, 0x7e);
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Sum>(e4(-448.0f), e4(-448.0f))).bits, 0xfe);
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Prod>(e4(16.0f), e4(32.0f))).bits, 0x7e);
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Sum>(e4(1.0f), e4(0.0625f))).bits, e4(1.0f).bits);  // tie to even
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Sum>(Fp8E4M3{0x7f}, e4(1.0f))).bits, 0x7f);
  EXPECT_EQ((reduceOnce<Fp8E4M3, RedKind::Max>(e4(-2.0f), e4(-1.0f))).bits, e4(-1.0f).bits);
  EXPECT_EQ((reduceOnce<Fp8E5M2, RedKind::Sum>(e5(57344.0f), e5(57344.0f))).bits, 0x7b);
  EXPECT_EQ((reduceOnce<Fp8E5M2, RedKind::Sum>(e5(1.0f), e5(2.0f))).bits, e5(3.0f).bits);
  EXPECT_EQ((reduceOnce<Fp8E5M2, RedKind::Prod>(e5(-3.0f), e5(4.0f))).bits, e5(-12.0f).bits);
  // An E5M2 infinity does not survive a reduction: the result saturates, as NCCL's does.
  EXPECT_EQ((reduceOnce<Fp8E5M2, RedKind::Sum>(Fp8E5M2{0x7c}, e5(1.0f))).bits, 0x7b);
  EXPECT_EQ((reduceOnce<Fp8E5M2, RedKind::Min>(Fp8E5M2{0xfc}, e5(1.0f))).bits, 0xfc);  // Min returns it as is
}

// For every pair of fp8 values, Sum and Prod through float equal the exact
// result (computed in double) rounded once.
template <typename T>
void expectFp8SumProdCorrectlyRounded() {
  for (uint32_t x = 0; x < 256; ++x) {
    for (uint32_t y = 0; y < 256; ++y) {
      T a{uint8_t(x)}, b{uint8_t(y)};
      double da = toFloat(a), db = toFloat(b);
      if (std::isnan(da) || std::isnan(db) || std::isinf(da) || std::isinf(db)) continue;
      // Exact in double; its float rounding is exact too for these formats' products,
      // and for sums the double is converted with fromFloat only after checking it is exact.
      double sum = da + db, prod = da * db;
      if (double(float(sum)) == sum) {
        ASSERT_EQ((reduceOnce<T, RedKind::Sum>(a, b)).bits, fromFloat<T>(float(sum)).bits) << x << " + " << y;
      }
      ASSERT_EQ(double(float(prod)), prod);
      ASSERT_EQ((reduceOnce<T, RedKind::Prod>(a, b)).bits, fromFloat<T>(float(prod)).bits) << x << " * " << y;
    }
  }
}

TEST(ReduceOpsTest, Fp8SumProdCorrectlyRoundedForAllPairs) {
  expectFp8SumProdCorrectlyRounded<Fp8E4M3>();
  expectFp8SumProdCorrectlyRounded<Fp8E5M2>();
}

// ---- dispatch ----

TEST(ReduceOpsTest, DispatchRedKindPassesKindScalarAndDivisor) {
  for (RedKind kind :
       {RedKind::Sum, RedKind::Prod, RedKind::Max, RedKind::Min, RedKind::PreMulSum, RedKind::SumPostDiv}) {
    int calls = 0;
    EXPECT_TRUE(dispatchRedKind<int32_t>(kind, 7, 5, [&](auto op) {
      ++calls;
      using Op = decltype(op);
      EXPECT_TRUE((std::is_same_v<Op, RedOp<int32_t, RedKind::Sum>> && kind == RedKind::Sum) ||
                  (std::is_same_v<Op, RedOp<int32_t, RedKind::Prod>> && kind == RedKind::Prod) ||
                  (std::is_same_v<Op, RedOp<int32_t, RedKind::Max>> && kind == RedKind::Max) ||
                  (std::is_same_v<Op, RedOp<int32_t, RedKind::Min>> && kind == RedKind::Min) ||
                  (std::is_same_v<Op, RedOp<int32_t, RedKind::PreMulSum>> && kind == RedKind::PreMulSum) ||
                  (std::is_same_v<Op, RedOp<int32_t, RedKind::SumPostDiv>> && kind == RedKind::SumPostDiv));
      EXPECT_EQ(op.scalar, 7);
      EXPECT_EQ(op.divisor, 5);
    }));
    EXPECT_EQ(calls, 1);
  }
}

TEST(ReduceOpsTest, DispatchRedKindRejectsInvalidKinds) {
  int calls = 0;
  EXPECT_FALSE(dispatchRedKind<int32_t>(static_cast<RedKind>(42), 0, 1, [&](auto) { ++calls; }));
  EXPECT_FALSE(dispatchRedKind<int32_t>(static_cast<RedKind>(-1), 0, 1, [&](auto) { ++calls; }));
  // Floating types average through PreMulSum; SumPostDiv does not exist for them.
  EXPECT_FALSE(dispatchRedKind<float>(RedKind::SumPostDiv, 0.0f, 4, [&](auto) { ++calls; }));
  EXPECT_FALSE(dispatchRedKind<Half>(RedKind::SumPostDiv, Half{}, 4, [&](auto) { ++calls; }));
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(dispatchRedKind<float>(RedKind::PreMulSum, 0.25f, 4, [&](auto op) {
    ++calls;
    EXPECT_EQ(op.pre(8.0f), 2.0f);
  }));
  EXPECT_EQ(calls, 1);
}

// ---- array loops ----

constexpr size_t kSizes[] = {0, 1, 7, 1023};
constexpr int kCanary = 0x5a;

// Fills dst with a canary one element past n, runs the loop and checks the
// canary survived.
template <typename T>
std::vector<T> withCanary(size_t n) {
  std::vector<T> v(n + 1);
  std::memset(v.data(), kCanary, (n + 1) * sizeof(T));
  return v;
}
template <typename T>
bool canaryIntact(const std::vector<T>& v, size_t n) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(v.data() + n);
  for (size_t i = 0; i < sizeof(T); ++i)
    if (p[i] != kCanary) return false;
  return true;
}

TEST(ReduceOpsTest, ReduceArraysPreMulSumAppliesPreOnlyWhereAsked) {
  RedOp<int32_t, RedKind::PreMulSum> op{3, 0};
  for (size_t n : kSizes) {
    std::vector<int32_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = int32_t(i) - 500;
      b[i] = int32_t(i * 7);
    }
    for (int flags = 0; flags < 8; ++flags) {
      bool preA = flags & 1, preB = flags & 2, post = flags & 4;  // post does not apply: ignored
      auto dst = withCanary<int32_t>(n);
      reduceArrays(dst.data(), a.data(), b.data(), n, op, preA, preB, post);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(dst[i], (preA ? 3 : 1) * a[i] + (preB ? 3 : 1) * b[i])
            << "n " << n << " i " << i << " flags " << flags;
      EXPECT_TRUE(canaryIntact(dst, n)) << n;
    }
  }
}

TEST(ReduceOpsTest, ReduceArraysFloatPreMulSum) {
  RedOp<float, RedKind::PreMulSum> op{0.5f, 0};
  for (size_t n : kSizes) {
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = float(i);
      b[i] = float(i) * 0.25f;
    }
    for (int flags = 0; flags < 4; ++flags) {
      bool preA = flags & 1, preB = flags & 2;
      auto dst = withCanary<float>(n);
      reduceArrays(dst.data(), a.data(), b.data(), n, op, preA, preB, true);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(dst[i], (preA ? 0.5f : 1.0f) * a[i] + (preB ? 0.5f : 1.0f) * b[i]) << n << " " << i;
      EXPECT_TRUE(canaryIntact(dst, n));
    }
  }
}

TEST(ReduceOpsTest, ReduceArraysSumPostDivDividesOnlyWhenAsked) {
  RedOp<int64_t, RedKind::SumPostDiv> op{0, 4};
  for (size_t n : kSizes) {
    std::vector<int64_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = int64_t(i) * 3 - 1000;
      b[i] = -int64_t(i);
    }
    for (bool post : {false, true}) {
      auto dst = withCanary<int64_t>(n);
      reduceArrays(dst.data(), a.data(), b.data(), n, op, true, true, post);  // pre flags ignored
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], post ? (a[i] + b[i]) / 4 : a[i] + b[i]) << n << " " << i;
      EXPECT_TRUE(canaryIntact(dst, n));
    }
  }
}

TEST(ReduceOpsTest, ReduceArraysInPlaceAndPerType) {
  for (size_t n : kSizes) {
    // int8 Prod in place (dst == a) wraps.
    std::vector<int8_t> a8(n), b8(n), expect8(n);
    for (size_t i = 0; i < n; ++i) {
      a8[i] = int8_t(i * 37);
      b8[i] = int8_t(i + 3);
      expect8[i] = int8_t(uint8_t(a8[i]) * uint8_t(b8[i]));
    }
    reduceArrays(a8.data(), a8.data(), b8.data(), n, RedOp<int8_t, RedKind::Prod>{}, false, false, false);
    EXPECT_EQ(a8, expect8);

    // Half Sum in place (dst == b), element by element against reduce().
    std::vector<Half> ah(n), bh(n), expectH(n);
    for (size_t i = 0; i < n; ++i) {
      ah[i] = Half{uint16_t(i * 61)};  // spans subnormals and normals
      bh[i] = fromFloat<Half>(float(i) / 3);
      expectH[i] = RedOp<Half, RedKind::Sum>{}.reduce(ah[i], bh[i]);
    }
    reduceArrays(bh.data(), ah.data(), bh.data(), n, RedOp<Half, RedKind::Sum>{}, false, false, false);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bh[i].bits, expectH[i].bits) << i;

    // float Max and Min, out of place.
    std::vector<float> af(n), bf(n);
    for (size_t i = 0; i < n; ++i) {
      af[i] = float(i % 5) - 2.0f;
      bf[i] = (i % 3 == 0) ? kNaN : float(i % 4) - 1.5f;
    }
    auto dmax = withCanary<float>(n), dmin = withCanary<float>(n);
    reduceArrays(dmax.data(), af.data(), bf.data(), n, RedOp<float, RedKind::Max>{}, false, false, false);
    reduceArrays(dmin.data(), af.data(), bf.data(), n, RedOp<float, RedKind::Min>{}, false, false, false);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(dmax[i], std::fmax(af[i], bf[i])) << i;
      ASSERT_EQ(dmin[i], std::fmin(af[i], bf[i])) << i;
    }
    EXPECT_TRUE(canaryIntact(dmax, n));
    EXPECT_TRUE(canaryIntact(dmin, n));
  }
}

// The array loops are vectorised (and on x86 may run an AVX2 clone): over every
// bit pattern they must give exactly what the scalar reduce() gives.
template <typename T, RedKind K>
void expectArrayLoopMatchesScalarOnAllPatterns(T other) {
  constexpr size_t count = size_t(1) << (8 * sizeof(T));
  std::vector<T> a(count), b(count, other), dst(count);
  for (size_t i = 0; i < count; ++i) a[i] = T{static_cast<decltype(T::bits)>(i)};
  RedOp<T, K> op{other, 1};
  reduceArrays(dst.data(), a.data(), b.data(), count, op, true, false, false);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(dst[i].bits, op.reduce(op.pre(a[i]), other).bits) << "pattern " << i;
  copyArray(dst.data(), a.data(), count, op, true, false);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(dst[i].bits, op.pre(a[i]).bits) << "pattern " << i;
}

TEST(ReduceOpsTest, ArrayLoopsMatchScalarOnAllPatterns) {
  for (float other : {1.0f, -3.0e-5f, 1.5e4f}) {
    expectArrayLoopMatchesScalarOnAllPatterns<Half, RedKind::Sum>(fromFloat<Half>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<Half, RedKind::Prod>(fromFloat<Half>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<Half, RedKind::Max>(fromFloat<Half>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<Half, RedKind::PreMulSum>(fromFloat<Half>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<BFloat16, RedKind::Sum>(fromFloat<BFloat16>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<BFloat16, RedKind::Min>(fromFloat<BFloat16>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<Fp8E4M3, RedKind::PreMulSum>(fromFloat<Fp8E4M3>(other));
    expectArrayLoopMatchesScalarOnAllPatterns<Fp8E5M2, RedKind::Prod>(fromFloat<Fp8E5M2>(other));
  }
}

TEST(ReduceOpsTest, CopyArrayAppliesPreAndPost) {
  for (size_t n : kSizes) {
    std::vector<int32_t> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = int32_t(i) * 5 - 2000;

    RedOp<int32_t, RedKind::PreMulSum> mul{-2, 0};
    RedOp<int32_t, RedKind::SumPostDiv> div{0, 3};
    RedOp<int32_t, RedKind::Sum> sum{};
    for (int flags = 0; flags < 4; ++flags) {
      bool pre = flags & 1, post = flags & 2;
      auto dMul = withCanary<int32_t>(n), dDiv = withCanary<int32_t>(n), dSum = withCanary<int32_t>(n);
      copyArray(dMul.data(), src.data(), n, mul, pre, post);
      copyArray(dDiv.data(), src.data(), n, div, pre, post);
      copyArray(dSum.data(), src.data(), n, sum, pre, post);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(dMul[i], pre ? src[i] * -2 : src[i]) << i;
        ASSERT_EQ(dDiv[i], post ? src[i] / 3 : src[i]) << i;
        ASSERT_EQ(dSum[i], src[i]) << i;
      }
      EXPECT_TRUE(canaryIntact(dMul, n));
      EXPECT_TRUE(canaryIntact(dDiv, n));
      EXPECT_TRUE(canaryIntact(dSum, n));
    }

    // BFloat16 PreMulSum in place: each element rounded once after the multiply.
    std::vector<BFloat16> bf(n), expect(n);
    RedOp<BFloat16, RedKind::PreMulSum> third{fromFloat<BFloat16>(1.0f / 3), 0};
    for (size_t i = 0; i < n; ++i) {
      bf[i] = fromFloat<BFloat16>(float(i) + 0.5f);
      expect[i] = fromFloat<BFloat16>(toFloat(bf[i]) * toFloat(third.scalar));
    }
    copyArray(bf.data(), bf.data(), n, third, true, false);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bf[i].bits, expect[i].bits) << i;
  }
}

}  // namespace
}  // namespace chorus
