// Reduction operators and the elementwise loops that apply them.
// Executor-neutral: header-only, every function CHORUS_HD except the host-side
// dispatchRedKind, no exceptions, no virtual, no std::function.
//
// Semantics, per element type:
//  - Integers: Sum and Prod wrap modulo 2^bits (two's complement), computed in an
//    unsigned type of at least int's width so no promotion can overflow a signed int.
//    SumPostDiv divides with C's truncation toward zero after the wrapped sum
//    (NCCL's ncclAvg for integers).
//  - float, double: native arithmetic.
//  - Half, BFloat16, Fp8E4M3, Fp8E5M2: each op converts both operands to float,
//    computes in float and rounds once back to the type (fromFloat). For + and *
//    of two values of these formats this is correctly rounded (float has at least
//    2p+2 bits for each of them, so the double rounding is innocuous), i.e. the
//    same bits as __hadd/__hmul on a GPU. NCCL reduces fp8 through half, rounding
//    twice; going through float can differ from it in the last bit of rare results
//    but is the correctly rounded answer.
//  - Max/Min on floating types follow fmaxf/fminf, as NCCL does on the GPU: when
//    exactly one operand is NaN the other is returned; when both are, the second
//    (a NaN). Of two zeros Max takes +0 and Min -0, whichever comes first (fmaxf
//    may return either; a ring that combines an element on more than one rank must
//    get the same bits on each). So the result does not depend on the reduction
//    order, except for which NaN's payload survives. The chosen operand is returned
//    as stored (no rounding).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device/common/datatypes.h"
#include "device/common/platform.h"
#include "device/common/work.h"  // RedKind

namespace chorus {

namespace detail {

// Unsigned type in which wrapping integer arithmetic on T is well defined:
// never narrower than unsigned int, so uint8/int8 operands don't promote to int.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
CHORUS_HD T wrappingAdd(T a, T b) {
  return T(WrapType<T>(a) + WrapType<T>(b));
}
template <typename T>
CHORUS_HD T wrappingMul(T a, T b) {
  return T(WrapType<T>(a) * WrapType<T>(b));
}

// Whether `a` and `b` are equal (so both zeros, when their signs differ) and `a` has the
// wanted sign and `b` not. signbit, not a division: no branch the vectoriser must keep, no
// FE_DIVBYZERO. Integers have one zero.
template <typename F>
CHORUS_HD bool zeroOfSignFirst(F a, F b, bool negative) {
  if constexpr (std::is_floating_point_v<F>) {
    using std::signbit;
    return a == b && signbit(a) == negative && signbit(b) != negative;
  } else {
    return false;
  }
}

// fmax/fmin on any arithmetic type (NaN compares false, so `x != x` is the NaN test).
template <typename F>
CHORUS_HD bool pickFirstForMax(F a, F b) {
  return a > b || b != b || zeroOfSignFirst(a, b, false);
}
template <typename F>
CHORUS_HD bool pickFirstForMin(F a, F b) {
  return a < b || b != b || zeroOfSignFirst(a, b, true);
}

}  // namespace detail

template <typename T, RedKind K>
struct RedOp {
  static_assert(K != RedKind::SumPostDiv || std::is_integral_v<T>,
                "SumPostDiv is integer-only: floating types average through PreMulSum by 1/n");

  T scalar;     // PreMulSum: multiplier (already converted to T)
  int divisor;  // SumPostDiv: nranks (> 0)

  static constexpr bool kHasPre = K == RedKind::PreMulSum;
  static constexpr bool kHasPost = K == RedKind::SumPostDiv;

  // Sum/PreMulSum/SumPostDiv: a+b, Prod: a*b, Max, Min.
  CHORUS_HD T reduce(T a, T b) const {
    if constexpr (K == RedKind::Max || K == RedKind::Min) {
      bool first;
      if constexpr (kIsFloatStorage<T>) {
        first = K == RedKind::Max ? detail::pickFirstForMax(toFloat(a), toFloat(b))
                                  : detail::pickFirstForMin(toFloat(a), toFloat(b));
      } else {
        first = K == RedKind::Max ? detail::pickFirstForMax(a, b) : detail::pickFirstForMin(a, b);
      }
      return first ? a : b;
    } else if constexpr (kIsFloatStorage<T>) {
      float fa = toFloat(a), fb = toFloat(b);
      return fromFloat<T>(K == RedKind::Prod ? fa * fb : fa + fb);
    } else if constexpr (std::is_integral_v<T>) {
      return K == RedKind::Prod ? detail::wrappingMul(a, b) : detail::wrappingAdd(a, b);
    } else {
      return K == RedKind::Prod ? a * b : a + b;
    }
  }

  // PreMulSum: x*scalar; others: x.
  CHORUS_HD T pre(T x) const {
    if constexpr (!kHasPre) {
      return x;
    } else if constexpr (kIsFloatStorage<T>) {
      return fromFloat<T>(toFloat(x) * toFloat(scalar));
    } else if constexpr (std::is_integral_v<T>) {
      return detail::wrappingMul(x, scalar);
    } else {
      return x * scalar;
    }
  }

  // SumPostDiv: x/divisor, truncating toward zero; others: x.
  CHORUS_HD T post(T x) const {
    if constexpr (kHasPost) {
      // Divide in 64 bits of T's signedness: nranks may not fit in T (int8 with
      // 200 ranks), and uint64 values must stay out of a signed division.
      using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
      return T(Wide(x) / Wide(divisor));
    } else {
      return x;
    }
  }
};

namespace detail {

// One loop per combination of flags, so the loop body has no per-element branch
// and the compiler can vectorise it. dst may equal a or b exactly (in-place
// reduction) and so is not restrict-qualified; the compiler versions the loop
// with a runtime overlap check instead.
template <bool PreA, bool PreB, bool Post, typename T, RedKind K>
CHORUS_HD void reduceLoop(T* dst, const T* a, const T* b, size_t n, const RedOp<T, K> op) {
  for (size_t i = 0; i < n; ++i) {
    T x = a[i], y = b[i];
    if constexpr (PreA) x = op.pre(x);
    if constexpr (PreB) y = op.pre(y);
    T r = op.reduce(x, y);
    if constexpr (Post) r = op.post(r);
    dst[i] = r;
  }
}

template <bool Pre, bool Post, typename T, RedKind K>
CHORUS_HD void copyLoop(T* dst, const T* src, size_t n, const RedOp<T, K> op) {
  for (size_t i = 0; i < n; ++i) {
    T x = src[i];
    if constexpr (Pre) x = op.pre(x);
    if constexpr (Post) x = op.post(x);
    dst[i] = x;
  }
}

// The 16- and 8-bit float conversions make these loops compute-bound at the
// x86-64 baseline (SSE2); the same loops compiled for AVX2 run about twice as
// fast. The clone is chosen at run time so the library still runs on any x86-64.
// Host-only: nvcc's passes never see it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define CHORUS_AVX2_CLONES 1
inline bool cpuHasAvx2() {
  static const bool hasAvx2 = __builtin_cpu_supports("avx2");
  return hasAvx2;
}
template <bool PreA, bool PreB, bool Post, typename T, RedKind K>
__attribute__((target("avx2"), noinline)) void reduceLoopAvx2(T* dst, const T* a, const T* b, size_t n,
                                                              const RedOp<T, K> op) {
  reduceLoop<PreA, PreB, Post>(dst, a, b, n, op);
}
template <bool Pre, bool Post, typename T, RedKind K>
__attribute__((target("avx2"), noinline)) void copyLoopAvx2(T* dst, const T* src, size_t n, const RedOp<T, K> op) {
  copyLoop<Pre, Post>(dst, src, n, op);
}
#endif

template <bool PreA, bool PreB, bool Post, typename T, RedKind K>
CHORUS_HD void runReduceLoop(T* dst, const T* a, const T* b, size_t n, const RedOp<T, K> op) {
#ifdef CHORUS_AVX2_CLONES
  if constexpr (kIsFloatStorage<T>) {
    if (cpuHasAvx2()) return reduceLoopAvx2<PreA, PreB, Post>(dst, a, b, n, op);
  }
#endif
  reduceLoop<PreA, PreB, Post>(dst, a, b, n, op);
}

template <bool Pre, bool Post, typename T, RedKind K>
CHORUS_HD void runCopyLoop(T* dst, const T* src, size_t n, const RedOp<T, K> op) {
#ifdef CHORUS_AVX2_CLONES
  if constexpr (kIsFloatStorage<T> && (Pre || Post)) {
    if (cpuHasAvx2()) return copyLoopAvx2<Pre, Post>(dst, src, n, op);
  }
#endif
  copyLoop<Pre, Post>(dst, src, n, op);
}

}  // namespace detail

// dst[i] = post?(reduce(pre?(a[i]), pre?(b[i]))) for i < n.
// preA/preB: apply op.pre() to that input first (the rank's own contribution is
// pre-multiplied once, values already in the pipeline are not). postDst: apply
// op.post() to the result. Flags that do not apply to K are ignored.
// dst may be a or b exactly, but must not partially overlap either.
template <typename T, RedKind K>
CHORUS_HD void reduceArrays(T* dst, const T* a, const T* b, size_t n, const RedOp<T, K>& op, bool preA, bool preB,
                            bool postDst) {
  // Taken by value: a copy in registers cannot alias dst, so stores do not force
  // the scalar to be reloaded every iteration.
  const RedOp<T, K> local = op;
  if constexpr (RedOp<T, K>::kHasPre) {
    if (preA && preB) {
      detail::runReduceLoop<true, true, false>(dst, a, b, n, local);
    } else if (preA) {
      detail::runReduceLoop<true, false, false>(dst, a, b, n, local);
    } else if (preB) {
      detail::runReduceLoop<false, true, false>(dst, a, b, n, local);
    } else {
      detail::runReduceLoop<false, false, false>(dst, a, b, n, local);
    }
  } else if constexpr (RedOp<T, K>::kHasPost) {
    if (postDst) {
      detail::runReduceLoop<false, false, true>(dst, a, b, n, local);
    } else {
      detail::runReduceLoop<false, false, false>(dst, a, b, n, local);
    }
  } else {
    detail::runReduceLoop<false, false, false>(dst, a, b, n, local);
  }
}

// dst[i] = post?(pre?(src[i])) for i < n. dst may equal src exactly.
template <typename T, RedKind K>
CHORUS_HD void copyArray(T* dst, const T* src, size_t n, const RedOp<T, K>& op, bool pre, bool post) {
  const RedOp<T, K> local = op;
  if constexpr (RedOp<T, K>::kHasPre) {
    if (pre) return detail::runCopyLoop<true, false>(dst, src, n, local);
  } else if constexpr (RedOp<T, K>::kHasPost) {
    if (post) return detail::runCopyLoop<false, true>(dst, src, n, local);
  }
  detail::runCopyLoop<false, false>(dst, src, n, local);
}

// Calls f(RedOp<T,K>{scalar, divisor}) for the runtime kind; returns false for an
// invalid kind, and for SumPostDiv when T is not an integer type (floating types
// average through PreMulSum by 1/n).
template <typename T, typename F>
bool dispatchRedKind(RedKind k, T scalar, int divisor, F&& f) {
  switch (k) {
    case RedKind::Sum:
      f(RedOp<T, RedKind::Sum>{scalar, divisor});
      return true;
    case RedKind::Prod:
      f(RedOp<T, RedKind::Prod>{scalar, divisor});
      return true;
    case RedKind::Max:
      f(RedOp<T, RedKind::Max>{scalar, divisor});
      return true;
    case RedKind::Min:
      f(RedOp<T, RedKind::Min>{scalar, divisor});
      return true;
    case RedKind::PreMulSum:
      f(RedOp<T, RedKind::PreMulSum>{scalar, divisor});
      return true;
    case RedKind::SumPostDiv:
      if constexpr (std::is_integral_v<T>) {
        f(RedOp<T, RedKind::SumPostDiv>{scalar, divisor});
        return true;
      } else {
        return false;
      }
    default:
      return false;
  }
}

}  // namespace chorus
