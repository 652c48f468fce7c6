// Storage types for ncclDataType_t and their conversions to and from float.
// Executor-neutral: header-only, no OS or CUDA calls, every function CHORUS_HD
// (except the host-only dispatchType/typeName), so the CPU executor and nvcc
// compile the same code.
//
// Conversions are bit-exact with NVIDIA's:
//  - toFloat is exact for every format (all of them are subsets of float).
//  - fromFloat<Half>/<BFloat16>: round to nearest even, subnormals included,
//    overflow to +-inf, any NaN -> 0x7fff (NVIDIA's canonical NaN).
//  - fromFloat<Fp8E4M3>/<Fp8E5M2>: as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...):
//    round to nearest even, finite or infinite |x| above the largest finite value
//    -> +-max finite (448 / 57344), any NaN -> 0x7f.
// On the host the conversions are written as selects over integer and float arithmetic
// rather than branches so that loops over arrays of them vectorise. On a GPU they are the
// hardware's conversion instructions (fp8 from sm_89 on), with NaN made canonical as above.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/platform.h"
#include "nccl.h"

namespace chorus {

// 16-bit and 8-bit float storage types, bit-exact with IEEE half, bfloat16, and
// OCP fp8 E4M3 (no inf; NaN = S.1111.111; max finite 448) and E5M2 (IEEE-like, has inf).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

// True for the storage types above, whose arithmetic goes through float.
template <typename T>
inline constexpr bool kIsFloatStorage = false;
template <>
inline constexpr bool kIsFloatStorage<Half> = true;
template <>
inline constexpr bool kIsFloatStorage<BFloat16> = true;
template <>
inline constexpr bool kIsFloatStorage<Fp8E4M3> = true;
template <>
inline constexpr bool kIsFloatStorage<Fp8E5M2> = true;

namespace detail {

CHORUS_HD uint32_t floatBits(float f) { return __builtin_bit_cast(uint32_t, f); }
CHORUS_HD float bitsFloat(uint32_t u) { return __builtin_bit_cast(float, u); }

// cond ? a : b as a bit blend. Used where one side comes from a float operation:
// GCC (with its default -ftrapping-math) will not if-convert a conditionally
// executed float operation, so a plain ternary would keep a branch in the loop
// and stop it vectorising.
CHORUS_HD uint32_t blend(bool cond, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - uint32_t(cond);
  return (a & mask) | (b & ~mask);
}

constexpr uint32_t kFloatSignMask = 0x80000000u;
constexpr uint32_t kFloatAbsMask = 0x7fffffffu;
constexpr uint32_t kFloatInfBits = 0x7f800000u;

// Decodes a small float format whose sign-less bits `mag` (exponent and mantissa
// fields, exponent bias `Bias`, `MantBits` mantissa bits) sit at the bottom of a
// word. Normals rebias the exponent with one add; subnormals are normalised by a
// float subtraction of 2^(1-Bias) (exact, and both operands are normal floats, so
// flush-to-zero modes cannot change the result).
template <int Bias, int MantBits>
CHORUS_HD float decodeFinite(uint32_t mag) {
  constexpr uint32_t shift = 23 - MantBits;
  constexpr uint32_t minNormalBits = uint32_t(127 + 1 - Bias) << 23;  // 2^(1-Bias)
  uint32_t rebased = (mag << shift) + (uint32_t(127 - Bias) << 23);
  float subnormal = bitsFloat(rebased + (1u << 23)) - bitsFloat(minNormalBits);
  return bitsFloat(blend((mag >> MantBits) == 0, floatBits(subnormal), rebased));
}

// Rounds the non-negative, finite, in-range float with bits `absBits` to a small
// format (bias `Bias`, `MantBits` mantissa bits) with round-to-nearest-even, and
// returns the sign-less code. Values below the smallest normal are rounded by
// adding a magic float whose ulp is the format's smallest subnormal: the FPU
// rounds to nearest even, and the code is the low bits of the sum. A code that
// rounds up out of the subnormal range lands on the smallest normal's code, and
// one that rounds up out of a binade carries into the exponent: both are right.
template <int Bias, int MantBits>
CHORUS_HD uint32_t encodeFinite(uint32_t absBits) {
  constexpr uint32_t shift = 23 - MantBits;
  constexpr uint32_t minNormalBits = uint32_t(127 + 1 - Bias) << 23;
  constexpr uint32_t magicBits = uint32_t(127 + 1 - Bias + (23 - MantBits)) << 23;  // ulp = min subnormal
  uint32_t odd = (absBits >> shift) & 1u;
  uint32_t normal = (absBits - (uint32_t(127 - Bias) << 23) + ((1u << (shift - 1)) - 1u) + odd) >> shift;
  uint32_t subnormal = floatBits(bitsFloat(absBits) + bitsFloat(magicBits)) - magicBits;
  return blend(absBits < minNormalBits, subnormal, normal);
}

}  // namespace detail

// ---- to float: exact ----

CHORUS_HD float toFloat(Half h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#endif
  uint32_t mag = h.bits & 0x7fffu;
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  float finite = detail::decodeFinite<15, 10>(mag);
  // Inf/NaN: all-ones exponent, mantissa carried over (NaN payload kept).
  uint32_t special = detail::kFloatInfBits | (mag << 13);
  uint32_t magBits = detail::blend(mag >= 0x7c00u, special, detail::floatBits(finite));
  return detail::bitsFloat(magBits | sign);
}

CHORUS_HD float toFloat(BFloat16 b) { return detail::bitsFloat(uint32_t(b.bits) << 16); }

CHORUS_HD float toFloat(Fp8E4M3 x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t pair;  // two halves; the low one is x's
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair) : "h"(static_cast<uint16_t>(x.bits)));
  return toFloat(Half{static_cast<uint16_t>(pair & 0xffffu)});
#endif
  uint32_t mag = x.bits & 0x7fu;
  uint32_t sign = uint32_t(x.bits & 0x80u) << 24;
  // E4M3 has no infinity; S.1111.111 is its only NaN.
  uint32_t magBits = detail::blend(mag == 0x7fu, 0x7fc00000u, detail::floatBits(detail::decodeFinite<7, 3>(mag)));
  return detail::bitsFloat(magBits | sign);
}

// E5M2 is the top byte of an IEEE half, so it decodes exactly as one.
CHORUS_HD float toFloat(Fp8E5M2 x) { return toFloat(Half{uint16_t(x.bits << 8)}); }

// ---- from float: round to nearest even ----

// fromFloat<T>(f): round to nearest even; NaN stays NaN; fp8 saturates to the largest finite (as NCCL's
// __NV_SATFINITE).
template <typename T>
CHORUS_HD T fromFloat(float f);

template <>
CHORUS_HD Half fromFloat<Half>(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  return Half{f != f ? uint16_t(0x7fffu) : bits};
#endif
  uint32_t u = detail::floatBits(f);
  uint32_t absBits = u & detail::kFloatAbsMask;
  uint32_t sign = (u >> 16) & 0x8000u;
  // Clamping at 65536 makes everything from the rounding boundary (65520) up,
  // inf included, encode as 0x7c00 (inf) through the ordinary path.
  constexpr uint32_t clampBits = 0x47800000u;  // 65536.0f
  uint32_t clamped = absBits < clampBits ? absBits : clampBits;
  uint32_t code = detail::encodeFinite<15, 10>(clamped);
  return Half{uint16_t(detail::blend(absBits > detail::kFloatInfBits, 0x7fffu, code | sign))};
}

template <>
CHORUS_HD BFloat16 fromFloat<BFloat16>(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint16_t bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  return BFloat16{f != f ? uint16_t(0x7fffu) : bits};
#endif
  uint32_t u = detail::floatBits(f);
  // bfloat16 is the top half of a float: round the low 16 bits away. The carry
  // rounds the largest finite values up to inf, as it should.
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  bool isNan = (u & detail::kFloatAbsMask) > detail::kFloatInfBits;
  return BFloat16{uint16_t(isNan ? 0x7fffu : rounded)};
}

template <>
CHORUS_HD Fp8E4M3 fromFloat<Fp8E4M3>(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;  // converts (0, f): f's byte is the low one; satfinite is __NV_SATFINITE
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  return Fp8E4M3{uint8_t(f != f ? 0x7fu : (pair & 0xffu))};
#endif
  uint32_t u = detail::floatBits(f);
  uint32_t absBits = u & detail::kFloatAbsMask;
  uint32_t sign = (u >> 24) & 0x80u;
  // Saturation: anything above 448 (inf included) becomes 448 (code 0x7e).
  constexpr uint32_t maxFiniteBits = 0x43e00000u;  // 448.0f
  uint32_t clamped = absBits < maxFiniteBits ? absBits : maxFiniteBits;
  uint32_t code = detail::encodeFinite<7, 3>(clamped);
  return Fp8E4M3{uint8_t(detail::blend(absBits > detail::kFloatInfBits, 0x7fu, code | sign))};
}

template <>
CHORUS_HD Fp8E5M2 fromFloat<Fp8E5M2>(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  return Fp8E5M2{uint8_t(f != f ? 0x7fu : (pair & 0xffu))};
#endif
  uint32_t u = detail::floatBits(f);
  uint32_t absBits = u & detail::kFloatAbsMask;
  uint32_t sign = (u >> 24) & 0x80u;
  // Saturation: anything above 57344 (inf included) becomes 57344 (code 0x7b).
  constexpr uint32_t maxFiniteBits = 0x47600000u;  // 57344.0f
  uint32_t clamped = absBits < maxFiniteBits ? absBits : maxFiniteBits;
  uint32_t code = detail::encodeFinite<15, 2>(clamped);
  return Fp8E5M2{uint8_t(detail::blend(absBits > detail::kFloatInfBits, 0x7fu, code | sign))};
}

// ---- ncclDataType_t <-> storage type ----

// TypeOf<ncclFloat16>::type == Half, etc. for all 12 ncclDataType_t values.
template <ncclDataType_t D>
struct TypeOf;
template <>
struct TypeOf<ncclInt8> {
  using type = int8_t;
};
template <>
struct TypeOf<ncclUint8> {
  using type = uint8_t;
};
template <>
struct TypeOf<ncclInt32> {
  using type = int32_t;
};
template <>
struct TypeOf<ncclUint32> {
  using type = uint32_t;
};
template <>
struct TypeOf<ncclInt64> {
  using type = int64_t;
};
template <>
struct TypeOf<ncclUint64> {
  using type = uint64_t;
};
template <>
struct TypeOf<ncclFloat16> {
  using type = Half;
};
template <>
struct TypeOf<ncclFloat32> {
  using type = float;
};
template <>
struct TypeOf<ncclFloat64> {
  using type = double;
};
template <>
struct TypeOf<ncclBfloat16> {
  using type = BFloat16;
};
template <>
struct TypeOf<ncclFloat8e4m3> {
  using type = Fp8E4M3;
};
template <>
struct TypeOf<ncclFloat8e5m2> {
  using type = Fp8E5M2;
};

// Size in bytes of a ncclDataType_t (0 for an invalid value).
CHORUS_HD size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// Calls f(T{}) with T the storage type of t; returns false for an invalid t.
template <typename F>
bool dispatchType(ncclDataType_t t, F&& f) {
  switch (t) {
    case ncclInt8:
      f(int8_t{});
      return true;
    case ncclUint8:
      f(uint8_t{});
      return true;
    case ncclInt32:
      f(int32_t{});
      return true;
    case ncclUint32:
      f(uint32_t{});
      return true;
    case ncclInt64:
      f(int64_t{});
      return true;
    case ncclUint64:
      f(uint64_t{});
      return true;
    case ncclFloat16:
      f(Half{});
      return true;
    case ncclFloat32:
      f(float{});
      return true;
    case ncclFloat64:
      f(double{});
      return true;
    case ncclBfloat16:
      f(BFloat16{});
      return true;
    case ncclFloat8e4m3:
      f(Fp8E4M3{});
      return true;
    case ncclFloat8e5m2:
      f(Fp8E5M2{});
      return true;
    default:
      return false;
  }
}

// Name of a ncclDataType_t as NCCL's logs spell it; "invalid" otherwise.
inline const char* typeName(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return "int8";
    case ncclUint8:
      return "uint8";
    case ncclInt32:
      return "int32";
    case ncclUint32:
      return "uint32";
    case ncclInt64:
      return "int64";
    case ncclUint64:
      return "uint64";
    case ncclFloat16:
      return "float16";
    case ncclFloat32:
      return "float32";
    case ncclFloat64:
      return "float64";
    case ncclBfloat16:
      return "bfloat16";
    case ncclFloat8e4m3:
      return "float8e4m3";
    case ncclFloat8e5m2:
      return "float8e5m2";
    default:
      return "invalid";
  }
}

}  // namespace chorus
