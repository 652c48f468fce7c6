// Element loops shared by the threads of one executor context (a "team"): the
// threads of a GPU block working on one channel, or a single host thread.
//
// The Exec interface's team half (see simple_primitives.h for the rest):
//   int exec.tid(), int exec.nthreads()   — this thread's index in the team, the team's size;
//   void exec.teamSync()                  — barrier; memory written before it is visible after;
//   bool exec.teamAll(bool)               — barrier that also tells whether every thread passed true;
//   static constexpr bool Exec::kTeamOfOne — the team is always one thread (the CPU executor):
//                                           the team code compiles away, and LL/LL128 lines
//                                           move in staged blocks rather than one per thread.
// A team of one runs the plain loops of reduce_ops.h unchanged. A larger team deals out 16-byte packs round robin:
// thread t takes packs t, t + N, ..., so neighbouring threads touch neighbouring bytes (coalesced on a GPU), and
// aligned packs move as single 16-byte loads and stores, kPacksInFlight of a thread's packs loaded before any is
// stored: a load from another GPU's memory or the host's takes a microsecond or more, and one at a time per thread
// would leave the link mostly idle.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/dynamic_red_op.h"
#include "device/common/platform.h"
#include "device/common/reduce_ops.h"

namespace chorus {

namespace detail {

template <typename T>
struct alignas(16) Pack16 {
  static constexpr size_t kElems = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  T v[kElems];
};

CHORUS_HD bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Calls body(i, m) for each of this thread's packs: elements [i, i + m).
template <typename Exec, typename T, typename Body>
CHORUS_HD void forEachTeamPack(const Exec& exec, size_t n, Body&& body) {
  constexpr size_t kPack = Pack16<T>::kElems;
  const size_t stride = static_cast<size_t>(exec.nthreads()) * kPack;
  for (size_t i = static_cast<size_t>(exec.tid()) * kPack; i < n; i += stride) body(i, n - i < kPack ? n - i : kPack);
}

// Per thread; two for 1-byte types, whose sixteen elements a pack each take a register
// to reduce: four then spill past the 128 registers a thread of a 512-thread block has.
template <typename T>
inline constexpr int kPacksInFlight = sizeof(T) == 1 ? 2 : 4;

// For aligned buffers: calls batch(at, count) for this thread's whole packs, up to
// kPacksInFlight<T> at a time (at[u]: the first element of the u-th; each batch's loads are
// issued before its stores), then tail(i, m) for the last partial pack [i, i + m) on the
// thread forEachTeamPack gives it: every element has one thread on both paths, so passes
// over one buffer may follow each other without a barrier whichever path each takes
// (simple_primitives.h's reduceAll).
template <typename Exec, typename T, typename Batch, typename Tail>
CHORUS_HD void forEachTeamPackBatch(const Exec& exec, size_t n, Batch&& batch, Tail&& tail) {
  constexpr size_t kPack = Pack16<T>::kElems;
  const size_t packs = n / kPack;
  const size_t stride = static_cast<size_t>(exec.nthreads());
  for (size_t p = static_cast<size_t>(exec.tid()); p < packs;) {
    size_t at[kPacksInFlight<T>];
    int count = 0;
    for (; count < kPacksInFlight<T> && p < packs; ++count, p += stride) at[count] = p * kPack;
    batch(at, count);
  }
  if (packs * kPack < n && static_cast<size_t>(exec.tid()) == packs % stride) tail(packs * kPack, n - packs * kPack);
}

}  // namespace detail

// copyArray (reduce_ops.h, dynamic_red_op.h) shared among the team.
template <typename Exec, typename T, typename Op>
CHORUS_HD_OUTLINE void teamCopy(const Exec& exec, T* dst, const T* src, size_t n, const Op& op, bool pre, bool post) {
  if constexpr (Exec::kTeamOfOne) {
    return copyArray(dst, src, n, op, pre, post);
  } else {
    using P = detail::Pack16<T>;
    auto scalar = [&](size_t i, size_t m) { copyArray(dst + i, src + i, m, op, pre, post); };
    if (!detail::aligned16(dst) || !detail::aligned16(src)) return detail::forEachTeamPack<Exec, T>(exec, n, scalar);
    auto batch = [&](const size_t* at, int count) {
      P x[detail::kPacksInFlight<T>] = {};  // only the first `count` are used
      CHORUS_UNROLL
      for (int u = 0; u < detail::kPacksInFlight<T>; ++u)
        if (u < count) x[u] = *reinterpret_cast<const P*>(src + at[u]);
      CHORUS_UNROLL
      for (int u = 0; u < detail::kPacksInFlight<T>; ++u) {
        if (u >= count) continue;
        copyArray(x[u].v, x[u].v, P::kElems, op, pre, post);
        *reinterpret_cast<P*>(dst + at[u]) = x[u];
      }
    };
    detail::forEachTeamPackBatch<Exec, T>(exec, n, batch, scalar);
  }
}

// reduceArrays (reduce_ops.h, dynamic_red_op.h) shared among the team.
template <typename Exec, typename T, typename Op>
CHORUS_HD_OUTLINE void teamReduce(const Exec& exec, T* dst, const T* a, const T* b, size_t n, const Op& op, bool preA,
                                  bool preB, bool postDst) {
  if constexpr (Exec::kTeamOfOne) {
    return reduceArrays(dst, a, b, n, op, preA, preB, postDst);
  } else {
    using P = detail::Pack16<T>;
    auto scalar = [&](size_t i, size_t m) { reduceArrays(dst + i, a + i, b + i, m, op, preA, preB, postDst); };
    if (!detail::aligned16(dst) || !detail::aligned16(a) || !detail::aligned16(b))
      return detail::forEachTeamPack<Exec, T>(exec, n, scalar);
    auto batch = [&](const size_t* at, int count) {
      P x[detail::kPacksInFlight<T>] = {}, y[detail::kPacksInFlight<T>] = {};  // the first `count` are used
      CHORUS_UNROLL
      for (int u = 0; u < detail::kPacksInFlight<T>; ++u) {
        if (u >= count) continue;
        x[u] = *reinterpret_cast<const P*>(a + at[u]);
        y[u] = *reinterpret_cast<const P*>(b + at[u]);
      }
      CHORUS_UNROLL
      for (int u = 0; u < detail::kPacksInFlight<T>; ++u) {
        if (u >= count) continue;
        reduceArrays(x[u].v, x[u].v, y[u].v, P::kElems, op, preA, preB, postDst);
        *reinterpret_cast<P*>(dst + at[u]) = x[u];
      }
    };
    detail::forEachTeamPackBatch<Exec, T>(exec, n, batch, scalar);
  }
}

}  // namespace chorus
