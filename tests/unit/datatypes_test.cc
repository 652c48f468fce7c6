// Conversions of the 16- and 8-bit float storage types, checked bit for bit
// against values worked out by hand, against slow decoders written from the
// format definitions, and exhaustively over every bit pattern.
#include "device/common/datatypes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace chorus {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Slow reference decoder straight from the definition of a binary float format
// with `expBits` exponent bits and `mantBits` mantissa bits. `ieeeSpecials`:
// an all-ones exponent means inf/NaN (IEEE half, bfloat16, E5M2); otherwise only
// the all-ones pattern is NaN and there is no inf (OCP E4M3).
double referenceDecode(uint32_t code, int expBits, int mantBits, bool ieeeSpecials) {
  int bias = (1 << (expBits - 1)) - 1;
  uint32_t mant = code & ((1u << mantBits) - 1);
  uint32_t exp = (code >> mantBits) & ((1u << expBits) - 1);
  bool negative = (code >> (mantBits + expBits)) & 1;
  uint32_t expAllOnes = (1u << expBits) - 1;
  double magnitude;
  if (ieeeSpecials && exp == expAllOnes) {
    magnitude = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!ieeeSpecials && exp == expAllOnes && mant == (1u << mantBits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    magnitude = std::ldexp(double(mant), 1 - bias - mantBits);
  } else {
    magnitude = std::ldexp(1.0 + std::ldexp(double(mant), -mantBits), int(exp) - bias);
  }
  return negative ? -magnitude : magnitude;
}

// toFloat for every pattern equals the reference decoder (NaN for NaN).
template <typename T>
void expectDecoderMatchesReference(int expBits, int mantBits, bool ieeeSpecials) {
  constexpr uint32_t count = 1u << (8 * sizeof(T));
  for (uint32_t code = 0; code < count; ++code) {
    T value{static_cast<decltype(T::bits)>(code)};
    double expected = referenceDecode(code, expBits, mantBits, ieeeSpecials);
    float actual = toFloat(value);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << "code 0x" << std::hex << code;
    } else {
      EXPECT_EQ(double(actual), expected) << "code 0x" << std::hex << code;
      EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << "code 0x" << std::hex << code;
    }
  }
}

// fromFloat(toFloat(x)) == x for every non-NaN pattern; except that E5M2's
// infinities saturate to the largest finite value (__NV_SATFINITE), passed here
// as `saturatedInfCode` (0 when infinities round-trip).
template <typename T>
void expectExhaustiveRoundTrip(uint32_t saturatedInfCode = 0) {
  constexpr uint32_t count = 1u << (8 * sizeof(T));
  constexpr uint32_t signBit = 1u << (8 * sizeof(T) - 1);
  int checked = 0;
  for (uint32_t code = 0; code < count; ++code) {
    T value{static_cast<decltype(T::bits)>(code)};
    float f = toFloat(value);
    if (std::isnan(f)) continue;
    uint32_t expected = code;
    if (std::isinf(f) && saturatedInfCode != 0) expected = saturatedInfCode | (code & signBit);
    EXPECT_EQ(uint32_t(fromFloat<T>(f).bits), expected) << "code 0x" << std::hex << code;
    ++checked;
  }
  EXPECT_GT(checked, int(count) * 9 / 10);
}

// For every pair of neighbouring finite values lo < hi of the same sign: the
// exact midpoint rounds to the one with the even code, and one float ulp either
// side of it rounds to the nearer one. This pins round-to-nearest-even at every
// boundary, subnormals and binade crossings included.
template <typename T>
void expectRoundToNearestEvenEverywhere(uint32_t largestFiniteCode) {
  constexpr uint32_t signBit = 1u << (8 * sizeof(T) - 1);
  for (uint32_t sign : {0u, signBit}) {
    for (uint32_t lo = 0; lo < largestFiniteCode; ++lo) {
      uint32_t hi = lo + 1;
      float loValue = toFloat(T{static_cast<decltype(T::bits)>(lo | sign)});
      float hiValue = toFloat(T{static_cast<decltype(T::bits)>(hi | sign)});
      // Exact: hi - lo is one ulp of the format, far above float's ulp.
      float midpoint = loValue + (hiValue - loValue) / 2;
      ASSERT_EQ(double(midpoint), (double(loValue) + double(hiValue)) / 2);
      uint32_t even = (lo & 1) == 0 ? lo : hi;
      float towardLo = std::nextafter(midpoint, loValue);
      float towardHi = std::nextafter(midpoint, hiValue);
      EXPECT_EQ(uint32_t(fromFloat<T>(midpoint).bits), even | sign) << "lo 0x" << std::hex << (lo | sign);
      EXPECT_EQ(uint32_t(fromFloat<T>(towardLo).bits), lo | sign) << "lo 0x" << std::hex << (lo | sign);
      EXPECT_EQ(uint32_t(fromFloat<T>(towardHi).bits), hi | sign) << "lo 0x" << std::hex << (lo | sign);
    }
  }
}

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- Half ----

TEST(DatatypesTest, HalfKnownValues) {
  EXPECT_EQ(fromFloat<Half>(1.0f).bits, 0x3c00);
  EXPECT_EQ(fromFloat<Half>(-2.0f).bits, 0xc000);
  EXPECT_EQ(fromFloat<Half>(65504.0f).bits, 0x7bff);
  EXPECT_EQ(fromFloat<Half>(0.0f).bits, 0x0000);
  EXPECT_EQ(fromFloat<Half>(-0.0f).bits, 0x8000);
  EXPECT_EQ(fromFloat<Half>(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(fromFloat<Half>(-std::ldexp(1.0f, -24)).bits, 0x8001);
  EXPECT_EQ(fromFloat<Half>(std::ldexp(1023.0f, -24)).bits, 0x03ff);  // largest subnormal
  EXPECT_EQ(fromFloat<Half>(std::ldexp(1.0f, -14)).bits, 0x0400);     // smallest normal

  EXPECT_EQ(toFloat(Half{0x3c00}), 1.0f);
  EXPECT_EQ(toFloat(Half{0xc000}), -2.0f);
  EXPECT_EQ(toFloat(Half{0x7bff}), 65504.0f);
  EXPECT_EQ(toFloat(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(toFloat(Half{0x03ff}), std::ldexp(1023.0f, -24));
  EXPECT_EQ(bitsOf(toFloat(Half{0x8000})), 0x80000000u);
  EXPECT_EQ(toFloat(Half{0x7c00}), kInf);
  EXPECT_EQ(toFloat(Half{0xfc00}), -kInf);
}

TEST(DatatypesTest, HalfRoundsTiesToEven) {
  EXPECT_EQ(fromFloat<Half>(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);      // tie, 0x3c00 even
  EXPECT_EQ(fromFloat<Half>(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);  // tie, 0x3c02 even
  EXPECT_EQ(fromFloat<Half>(std::ldexp(1.0f, -25)).bits, 0x0000);             // half the smallest subnormal
  EXPECT_EQ(fromFloat<Half>(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  EXPECT_EQ(fromFloat<Half>(std::ldexp(3.0f, -25)).bits, 0x0002);
  // Largest subnormal + half an ulp: tie between 0x03ff and 0x0400, rounds up into the normals.
  EXPECT_EQ(fromFloat<Half>(std::ldexp(2047.0f, -25)).bits, 0x0400);
  // Float subnormals are far below half's smallest subnormal.
  EXPECT_EQ(fromFloat<Half>(floatOf(0x00000001)).bits, 0x0000);
  EXPECT_EQ(fromFloat<Half>(floatOf(0x80000001)).bits, 0x8000);
}

TEST(DatatypesTest, HalfOverflowsToInfinityAndKeepsNaN) {
  EXPECT_EQ(fromFloat<Half>(65519.0f).bits, 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(fromFloat<Half>(65520.0f).bits, 0x7c00);  // tie, rounds to the even code: inf
  EXPECT_EQ(fromFloat<Half>(1e6f).bits, 0x7c00);
  EXPECT_EQ(fromFloat<Half>(-1e6f).bits, 0xfc00);
  EXPECT_EQ(fromFloat<Half>(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(fromFloat<Half>(kInf).bits, 0x7c00);
  EXPECT_EQ(fromFloat<Half>(-kInf).bits, 0xfc00);
  EXPECT_EQ(fromFloat<Half>(kNaN).bits, 0x7fff);  // NVIDIA's canonical NaN
  EXPECT_EQ(fromFloat<Half>(-kNaN).bits, 0x7fff);
  EXPECT_EQ(fromFloat<Half>(floatOf(0x7f800001)).bits, 0x7fff);  // signalling NaN with a tiny payload
  EXPECT_TRUE(std::isnan(toFloat(Half{0x7c01})));
  EXPECT_TRUE(std::isnan(toFloat(Half{0xfe00})));
}

TEST(DatatypesTest, HalfDecoderMatchesReference) { expectDecoderMatchesReference<Half>(5, 10, true); }
TEST(DatatypesTest, HalfExhaustiveRoundTrip) { expectExhaustiveRoundTrip<Half>(); }
TEST(DatatypesTest, HalfRoundToNearestEvenEverywhere) { expectRoundToNearestEvenEverywhere<Half>(0x7bff); }

// ---- BFloat16 ----

TEST(DatatypesTest, BFloat16KnownValues) {
  EXPECT_EQ(fromFloat<BFloat16>(1.0f).bits, 0x3f80);
  EXPECT_EQ(fromFloat<BFloat16>(-2.0f).bits, 0xc000);
  EXPECT_EQ(fromFloat<BFloat16>(-0.0f).bits, 0x8000);
  EXPECT_EQ(toFloat(BFloat16{0x3f80}), 1.0f);
  EXPECT_EQ(toFloat(BFloat16{0xc000}), -2.0f);
  EXPECT_EQ(toFloat(BFloat16{0x0001}), std::ldexp(1.0f, -133));  // smallest subnormal
  EXPECT_EQ(toFloat(BFloat16{0x7f80}), kInf);
  // Ties to even, among normals and among subnormals.
  EXPECT_EQ(fromFloat<BFloat16>(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(fromFloat<BFloat16>(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(fromFloat<BFloat16>(257.0f).bits, 0x4380);  // 256
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x00008000)).bits, 0x0000);
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x00008001)).bits, 0x0001);
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x00018000)).bits, 0x0002);
  // Overflow: the largest float rounds up to inf; a tie at the top goes to inf (even).
  EXPECT_EQ(fromFloat<BFloat16>(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x7f7f8000)).bits, 0x7f80);
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x7f7f7fff)).bits, 0x7f7f);
  EXPECT_EQ(fromFloat<BFloat16>(-kInf).bits, 0xff80);
  EXPECT_EQ(fromFloat<BFloat16>(kNaN).bits, 0x7fff);
  EXPECT_EQ(fromFloat<BFloat16>(floatOf(0x7f800001)).bits, 0x7fff);  // would round to inf if not caught
  EXPECT_TRUE(std::isnan(toFloat(BFloat16{0x7fc0})));
}

TEST(DatatypesTest, BFloat16DecoderMatchesReference) { expectDecoderMatchesReference<BFloat16>(8, 7, true); }
TEST(DatatypesTest, BFloat16ExhaustiveRoundTrip) { expectExhaustiveRoundTrip<BFloat16>(); }
TEST(DatatypesTest, BFloat16RoundToNearestEvenEverywhere) { expectRoundToNearestEvenEverywhere<BFloat16>(0x7f7f); }

// ---- Fp8E4M3 ----

TEST(DatatypesTest, Fp8E4M3KnownValues) {
  EXPECT_EQ(fromFloat<Fp8E4M3>(1.0f).bits, 0x38);
  EXPECT_EQ(fromFloat<Fp8E4M3>(-2.0f).bits, 0xc0);
  EXPECT_EQ(fromFloat<Fp8E4M3>(448.0f).bits, 0x7e);
  EXPECT_EQ(fromFloat<Fp8E4M3>(-448.0f).bits, 0xfe);
  EXPECT_EQ(fromFloat<Fp8E4M3>(240.0f).bits, 0x77);
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(1.0f, -9)).bits, 0x01);  // smallest subnormal
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(7.0f, -9)).bits, 0x07);  // largest subnormal
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(1.0f, -6)).bits, 0x08);  // smallest normal
  EXPECT_EQ(fromFloat<Fp8E4M3>(-0.0f).bits, 0x80);
  EXPECT_EQ(toFloat(Fp8E4M3{0x38}), 1.0f);
  EXPECT_EQ(toFloat(Fp8E4M3{0x7e}), 448.0f);
  EXPECT_EQ(toFloat(Fp8E4M3{0xfe}), -448.0f);
  EXPECT_EQ(toFloat(Fp8E4M3{0x78}), 256.0f);  // exponent 15 holds finite values in E4M3
  EXPECT_EQ(toFloat(Fp8E4M3{0x01}), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(toFloat(Fp8E4M3{0x7f})));
  EXPECT_TRUE(std::isnan(toFloat(Fp8E4M3{0xff})));
  // Ties to even.
  EXPECT_EQ(fromFloat<Fp8E4M3>(1.0f + 1.0f / 16).bits, 0x38);
  EXPECT_EQ(fromFloat<Fp8E4M3>(1.0f + 3.0f / 16).bits, 0x3a);
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(1.0f, -10)).bits, 0x00);
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(3.0f, -10)).bits, 0x02);
  EXPECT_EQ(fromFloat<Fp8E4M3>(std::ldexp(15.0f, -10)).bits, 0x08);  // largest subnormal + half ulp
}

TEST(DatatypesTest, Fp8E4M3SaturatesToMaxFinite) {
  EXPECT_EQ(fromFloat<Fp8E4M3>(449.0f).bits, 0x7e);
  EXPECT_EQ(fromFloat<Fp8E4M3>(464.0f).bits, 0x7e);  // 448 + half an ulp
  EXPECT_EQ(fromFloat<Fp8E4M3>(1e6f).bits, 0x7e);
  EXPECT_EQ(fromFloat<Fp8E4M3>(-1e6f).bits, 0xfe);
  EXPECT_EQ(fromFloat<Fp8E4M3>(kInf).bits, 0x7e);  // __NV_SATFINITE: inf too
  EXPECT_EQ(fromFloat<Fp8E4M3>(-kInf).bits, 0xfe);
  EXPECT_EQ(fromFloat<Fp8E4M3>(kNaN).bits, 0x7f);
  EXPECT_EQ(fromFloat<Fp8E4M3>(-kNaN).bits, 0x7f);
}

TEST(DatatypesTest, Fp8E4M3DecoderMatchesReference) { expectDecoderMatchesReference<Fp8E4M3>(4, 3, false); }
TEST(DatatypesTest, Fp8E4M3ExhaustiveRoundTrip) { expectExhaustiveRoundTrip<Fp8E4M3>(); }
TEST(DatatypesTest, Fp8E4M3RoundToNearestEvenEverywhere) { expectRoundToNearestEvenEverywhere<Fp8E4M3>(0x7e); }

// ---- Fp8E5M2 ----

TEST(DatatypesTest, Fp8E5M2KnownValues) {
  EXPECT_EQ(fromFloat<Fp8E5M2>(1.0f).bits, 0x3c);
  EXPECT_EQ(fromFloat<Fp8E5M2>(-2.0f).bits, 0xc0);
  EXPECT_EQ(fromFloat<Fp8E5M2>(57344.0f).bits, 0x7b);
  EXPECT_EQ(fromFloat<Fp8E5M2>(std::ldexp(1.0f, -16)).bits, 0x01);  // smallest subnormal
  EXPECT_EQ(fromFloat<Fp8E5M2>(std::ldexp(3.0f, -16)).bits, 0x03);  // largest subnormal
  EXPECT_EQ(fromFloat<Fp8E5M2>(std::ldexp(1.0f, -14)).bits, 0x04);  // smallest normal
  EXPECT_EQ(fromFloat<Fp8E5M2>(std::ldexp(1.0f, -17)).bits, 0x00);  // tie to even
  EXPECT_EQ(fromFloat<Fp8E5M2>(std::ldexp(3.0f, -17)).bits, 0x02);  // tie to even
  EXPECT_EQ(fromFloat<Fp8E5M2>(1.0f + 1.0f / 8).bits, 0x3c);
  EXPECT_EQ(fromFloat<Fp8E5M2>(1.0f + 3.0f / 8).bits, 0x3e);
  EXPECT_EQ(toFloat(Fp8E5M2{0x7b}), 57344.0f);
  EXPECT_EQ(toFloat(Fp8E5M2{0x7c}), kInf);
  EXPECT_EQ(toFloat(Fp8E5M2{0xfc}), -kInf);
  EXPECT_TRUE(std::isnan(toFloat(Fp8E5M2{0x7d})));
  EXPECT_TRUE(std::isnan(toFloat(Fp8E5M2{0xff})));
}

TEST(DatatypesTest, Fp8E5M2SaturatesToMaxFinite) {
  EXPECT_EQ(fromFloat<Fp8E5M2>(61439.0f).bits, 0x7b);
  EXPECT_EQ(fromFloat<Fp8E5M2>(61440.0f).bits, 0x7b);  // tie with "inf": saturates
  EXPECT_EQ(fromFloat<Fp8E5M2>(1e6f).bits, 0x7b);
  EXPECT_EQ(fromFloat<Fp8E5M2>(-1e6f).bits, 0xfb);
  EXPECT_EQ(fromFloat<Fp8E5M2>(kInf).bits, 0x7b);  // __NV_SATFINITE: inf too
  EXPECT_EQ(fromFloat<Fp8E5M2>(-kInf).bits, 0xfb);
  EXPECT_EQ(fromFloat<Fp8E5M2>(kNaN).bits, 0x7f);
  EXPECT_EQ(fromFloat<Fp8E5M2>(-kNaN).bits, 0x7f);
}

TEST(DatatypesTest, Fp8E5M2DecoderMatchesReference) { expectDecoderMatchesReference<Fp8E5M2>(5, 2, true); }
TEST(DatatypesTest, Fp8E5M2ExhaustiveRoundTrip) { expectExhaustiveRoundTrip<Fp8E5M2>(0x7b); }
TEST(DatatypesTest, Fp8E5M2RoundToNearestEvenEverywhere) { expectRoundToNearestEvenEverywhere<Fp8E5M2>(0x7b); }

// ---- ncclDataType_t mapping ----

static_assert(std::is_same_v<TypeOf<ncclInt8>::type, int8_t>);
static_assert(std::is_same_v<TypeOf<ncclUint8>::type, uint8_t>);
static_assert(std::is_same_v<TypeOf<ncclInt32>::type, int32_t>);
static_assert(std::is_same_v<TypeOf<ncclUint32>::type, uint32_t>);
static_assert(std::is_same_v<TypeOf<ncclInt64>::type, int64_t>);
static_assert(std::is_same_v<TypeOf<ncclUint64>::type, uint64_t>);
static_assert(std::is_same_v<TypeOf<ncclFloat16>::type, Half>);
static_assert(std::is_same_v<TypeOf<ncclFloat32>::type, float>);
static_assert(std::is_same_v<TypeOf<ncclFloat64>::type, double>);
static_assert(std::is_same_v<TypeOf<ncclBfloat16>::type, BFloat16>);
static_assert(std::is_same_v<TypeOf<ncclFloat8e4m3>::type, Fp8E4M3>);
static_assert(std::is_same_v<TypeOf<ncclFloat8e5m2>::type, Fp8E5M2>);
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2 && sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1);

template <ncclDataType_t D>
void expectDispatchMatchesTypeOf() {
  int calls = 0;
  bool sameType = false;
  EXPECT_TRUE(dispatchType(D, [&](auto tag) {
    ++calls;
    sameType = std::is_same_v<decltype(tag), typename TypeOf<D>::type>;
  }));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(sameType) << typeName(D);
  EXPECT_EQ(typeSize(D), sizeof(typename TypeOf<D>::type)) << typeName(D);
}

TEST(DatatypesTest, DispatchTypeAndTypeSizeAgreeWithTypeOf) {
  expectDispatchMatchesTypeOf<ncclInt8>();
  expectDispatchMatchesTypeOf<ncclUint8>();
  expectDispatchMatchesTypeOf<ncclInt32>();
  expectDispatchMatchesTypeOf<ncclUint32>();
  expectDispatchMatchesTypeOf<ncclInt64>();
  expectDispatchMatchesTypeOf<ncclUint64>();
  expectDispatchMatchesTypeOf<ncclFloat16>();
  expectDispatchMatchesTypeOf<ncclFloat32>();
  expectDispatchMatchesTypeOf<ncclFloat64>();
  expectDispatchMatchesTypeOf<ncclBfloat16>();
  expectDispatchMatchesTypeOf<ncclFloat8e4m3>();
  expectDispatchMatchesTypeOf<ncclFloat8e5m2>();
}

TEST(DatatypesTest, InvalidTypesAreRejected) {
  for (int raw : {int(ncclNumTypes), -1, 1000}) {
    auto type = static_cast<ncclDataType_t>(raw);
    int calls = 0;
    EXPECT_FALSE(dispatchType(type, [&](auto) { ++calls; }));
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(typeSize(type), 0u);
    EXPECT_STREQ(typeName(type), "invalid");
  }
}

TEST(DatatypesTest, TypeNames) {
  EXPECT_STREQ(typeName(ncclInt8), "int8");
  EXPECT_STREQ(typeName(ncclUint8), "uint8");
  EXPECT_STREQ(typeName(ncclInt32), "int32");
  EXPECT_STREQ(typeName(ncclUint32), "uint32");
  EXPECT_STREQ(typeName(ncclInt64), "int64");
  EXPECT_STREQ(typeName(ncclUint64), "uint64");
  EXPECT_STREQ(typeName(ncclFloat16), "float16");
  EXPECT_STREQ(typeName(ncclFloat32), "float32");
  EXPECT_STREQ(typeName(ncclFloat64), "float64");
  EXPECT_STREQ(typeName(ncclBfloat16), "bfloat16");
  EXPECT_STREQ(typeName(ncclFloat8e4m3), "float8e4m3");
  EXPECT_STREQ(typeName(ncclFloat8e5m2), "float8e5m2");
}

}  // namespace
}  // namespace chorus
