// A reduction op chosen at run time: one GPU kernel per data type serves Prod, Max,
// Min, PreMulSum and SumPostDiv, where one per type and op would multiply the kernels
// (and nvcc's time) by five. Each element's op is a switch on a kind that is the same
// for every thread, so it costs a uniform branch, not divergence. Sum, the common op,
// keeps its own kernel with the op fixed at compile time (RedOp<T, RedKind::Sum>).
// Same results as RedOp<T, K> for the same kind: it calls RedOp's operations.
#pragma once

#include <cstddef>
#include <type_traits>

#include "device/common/platform.h"
#include "device/common/reduce_ops.h"

namespace chorus {

template <typename T>
struct DynamicRedOp {
  RedKind kind;
  T scalar;     // PreMulSum's multiplier
  int divisor;  // SumPostDiv's divisor (integer types only)

  CHORUS_HD T reduce(T a, T b) const {
    switch (kind) {
      case RedKind::Prod:
        return RedOp<T, RedKind::Prod>{scalar, divisor}.reduce(a, b);
      case RedKind::Max:
        return RedOp<T, RedKind::Max>{scalar, divisor}.reduce(a, b);
      case RedKind::Min:
        return RedOp<T, RedKind::Min>{scalar, divisor}.reduce(a, b);
      default:  // Sum, PreMulSum, SumPostDiv
        return RedOp<T, RedKind::Sum>{scalar, divisor}.reduce(a, b);
    }
  }
  CHORUS_HD bool hasPre() const { return kind == RedKind::PreMulSum; }
  CHORUS_HD bool hasPost() const { return std::is_integral_v<T> && kind == RedKind::SumPostDiv; }
  CHORUS_HD T pre(T x) const { return RedOp<T, RedKind::PreMulSum>{scalar, divisor}.pre(x); }
  CHORUS_HD T post(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return RedOp<T, RedKind::SumPostDiv>{scalar, divisor}.post(x);
    } else {
      return x;
    }
  }
};

// reduceArrays and copyArray (reduce_ops.h) for a run-time op: the flags are resolved
// once per call into what applies to the op, then tested per element.
template <typename T>
CHORUS_HD void reduceArrays(T* dst, const T* a, const T* b, size_t n, const DynamicRedOp<T>& op, bool preA, bool preB,
                            bool postDst) {
  const DynamicRedOp<T> local = op;
  const bool pa = preA && local.hasPre(), pb = preB && local.hasPre(), post = postDst && local.hasPost();
  for (size_t i = 0; i < n; ++i) {
    T x = a[i], y = b[i];
    if (pa) x = local.pre(x);
    if (pb) y = local.pre(y);
    T r = local.reduce(x, y);
    if (post) r = local.post(r);
    dst[i] = r;
  }
}

template <typename T>
CHORUS_HD void copyArray(T* dst, const T* src, size_t n, const DynamicRedOp<T>& op, bool pre, bool post) {
  const DynamicRedOp<T> local = op;
  const bool p = pre && local.hasPre(), q = post && local.hasPost();
  for (size_t i = 0; i < n; ++i) {
    T x = src[i];
    if (p) x = local.pre(x);
    if (q) x = local.post(x);
    dst[i] = x;
  }
}

}  // namespace chorus
