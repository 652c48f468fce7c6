// Ring and chain algorithms of one channel, written once for both executors.
//
// `ring[k]` is the user rank k positions downstream of this rank (ring[0] is this
// rank, ring[1] the rank it sends to, ring[n-1] the rank it receives from). Block
// indices are user ranks, so data layouts follow NCCL's (AllGather block r at
// recvbuff + r*count, ReduceScatter block r at sendbuff + r*count).
// Every rank of a ring computes the same step sizes, so the step counters of the
// FIFOs stay in lock-step; steps of zero elements are still taken.
#pragma once

#include <cstddef>

#include "device/common/platform.h"
#include "device/common/simple_primitives.h"
#include "device/common/work.h"  // ChannelRange

namespace chorus {

CHORUS_HD size_t divUp(size_t a, size_t b) { return (a + b - 1) / b; }
CHORUS_HD size_t minSize(size_t a, size_t b) { return a < b ? a : b; }

// A ring of two is a pair: each rank sends its whole share and reduces the peer's into
// its own, one hop instead of the ring's two. Both ranks compute in (+) src with the two
// operands swapped, and every op is commutative, so they get the same bits (and the bits
// the two-step ring gives). It reduces the whole call on both ranks where the ring
// reduces half, so it pays only where the hop latency dominates: calls of at most
// kPairAllReduceMaxBytes (measured on the CPU executor: a gain up to 2 KiB, none from 8 KiB).
constexpr size_t kPairAllReduceMaxBytes = 2048;

template <typename Prims, typename T>
CHORUS_HD_OUTLINE void pairAllReduce(Prims& prims, const T* src, T* dst, size_t count) {
  prims.send(src, count, true);
  prims.recvReduceCopy(src, dst, count);
}

// Small calls on rings of three or more, on a team of one thread (the CPU executor):
// every rank's whole input travels once around the ring, n-1 hops where reduce-scatter
// then all-gather takes 2(n-1), and each rank folds the n values itself in the ring's
// order from rank 0, ((x0 (+) x1) (+) x2) ... (ranks named by that order; rank order on
// a ring 0 -> 1 -> ...) with pre() on each and post() once: the same expression on every
// rank, so every rank gets the same bits, and the deterministic mode's order
// (ordered_algorithms.h). Each hop carries the whole call where the ring's carry a 1/n
// block, and the values are held on the thread's stack, so it serves only calls whose n
// values fit in kGatherAllReduceMaxBytes (measured on the CPU executor: BENCHMARKS.md).
constexpr size_t kGatherAllReduceMaxBytes = 8192;

// Whether gatherAllReduce takes a channel's `count` elements: the same answer on every
// rank of the ring (src/tune/tuner.cc models it).
template <typename T, typename Prims>
CHORUS_HD bool gathers(const Prims& prims, int nranks, size_t count) {
  return Prims::kTeamOfOne && nranks > 2 && count > 0 && count <= prims.maxStepElems() &&
         nranks * count * sizeof(T) <= kGatherAllReduceMaxBytes;
}

template <typename Prims, typename T>
CHORUS_HD_OUTLINE void gatherAllReduce(Prims& prims, const int* ring, int nranks, const T* src, T* dst, size_t count) {
  // Block k holds the pipeline value of the rank k hops downstream (ring[k]). Block 0,
  // this rank's, is the fold's accumulator instead: its value is read from src, which
  // dst may alias, until the last fold.
  alignas(16) unsigned char storage[kGatherAllReduceMaxBytes];
  T* held = reinterpret_cast<T*>(storage);
  auto block = [&](int k) { return held + static_cast<size_t>(k) * count; };
  prims.send(src, count, true);
  for (int j = 1; j < nranks - 1; ++j) prims.recvCopySend(block(nranks - j), count);
  prims.recv(block(1), count, false);
  if (!prims.ok()) return;
  int zero = 0;  // rank 0's place downstream of this rank
  while (ring[zero] != 0) ++zero;
  auto place = [&](int j) { return (zero + j) % nranks; };  // the fold's j-th operand
  auto value = [&](int j) -> const T* { return place(j) == 0 ? src : block(place(j)); };
  T* acc = block(0);
  prims.localReduce(acc, value(0), value(1), count, place(0) == 0, place(1) == 0, false);
  for (int j = 2; j < nranks - 1; ++j) prims.localReduce(acc, acc, value(j), count, false, place(j) == 0, false);
  prims.localReduce(dst, acc, value(nranks - 1), count, false, place(nranks - 1) == 0, true);
}

// Reduce-scatter then all-gather around the ring: 2(n-1) steps per round.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void ringAllReduce(Prims& prims, const int* ring, int nranks, const T* sendbuff, T* recvbuff,
                                     ChannelRange range) {
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  const size_t count = range.count;
  if (nranks == 1) {
    prims.selfCopy(src, dst, count);
    return;
  }
  const size_t stepElems = prims.maxStepElems();
  if (nranks == 2 && count > 0 && count <= stepElems && count * sizeof(T) <= kPairAllReduceMaxBytes) {
    pairAllReduce(prims, src, dst, count);
    return;
  }
  if constexpr (Prims::kTeamOfOne) {
    if (gathers<T>(prims, nranks, count)) {
      gatherAllReduce(prims, ring, nranks, src, dst, count);
      return;
    }
  }
  for (size_t base = 0; base < count && prims.ok(); base += nranks * stepElems) {
    // Balance the round's blocks; round up to 16 elements to keep copies vector-sized.
    size_t block = minSize(stepElems, divUp(divUp(count - base, nranks), 16) * 16);
    auto blockStart = [&](int r) { return minSize(count, base + r * block); };
    auto blockCount = [&](int r) { return minSize(count, base + (r + 1) * block) - blockStart(r); };

    int b = ring[nranks - 1];
    prims.send(src + blockStart(b), blockCount(b), true);
    for (int j = 2; j < nranks; ++j) {
      b = ring[nranks - j];
      prims.recvReduceSend(src + blockStart(b), blockCount(b));
    }
    b = ring[0];
    prims.recvReduceCopySend(src + blockStart(b), dst + blockStart(b), blockCount(b));
    for (int j = 1; j < nranks - 1; ++j) {
      b = ring[nranks - j];
      prims.recvCopySend(dst + blockStart(b), blockCount(b));
    }
    b = ring[1];
    prims.recv(dst + blockStart(b), blockCount(b), false);
  }
}

// Block r (stride `blockStride` elements) of every rank ends reduced on rank r.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void ringReduceScatter(Prims& prims, const int* ring, int nranks, const T* sendbuff, T* recvbuff,
                                         size_t blockStride, ChannelRange range) {
  if (nranks == 1) {
    prims.selfCopy(sendbuff + range.offset, recvbuff + range.offset, range.count);
    return;
  }
  const size_t stepElems = prims.maxStepElems();
  for (size_t off = 0; off < range.count && prims.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    auto in = [&](int r) { return sendbuff + r * blockStride + range.offset + off; };
    prims.send(in(ring[nranks - 1]), n, true);
    for (int j = 2; j < nranks; ++j) prims.recvReduceSend(in(ring[nranks - j]), n);
    prims.recvReduceCopy(in(ring[0]), recvbuff + range.offset + off, n);
  }
}

// Every rank's block travels once around the ring.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void ringAllGather(Prims& prims, const int* ring, int nranks, const T* sendbuff, T* recvbuff,
                                     size_t blockStride, ChannelRange range) {
  const size_t stepElems = prims.maxStepElems();
  auto out = [&](int r, size_t off) { return recvbuff + r * blockStride + range.offset + off; };
  if (nranks == 1) {
    prims.selfCopy(sendbuff + range.offset, out(ring[0], 0), range.count);
    return;
  }
  for (size_t off = 0; off < range.count && prims.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    prims.copySend(sendbuff + range.offset + off, out(ring[0], off), n);
    for (int j = 1; j < nranks - 1; ++j) prims.recvCopySend(out(ring[nranks - j], off), n);
    prims.recv(out(ring[1], off), n, false);
  }
}

// A chain from `root` down the ring: root sends, the others receive and pass on.
// `pos` is this rank's distance downstream of the root.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void chainBroadcast(Prims& prims, int pos, int nranks, const T* sendbuff, T* recvbuff,
                                      ChannelRange range) {
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  if (nranks == 1) {
    prims.selfCopy(src, dst, range.count);
    return;
  }
  const size_t stepElems = prims.maxStepElems();
  for (size_t off = 0; off < range.count && prims.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    if (pos == 0) {
      prims.copySend(src + off, dst + off, n);
    } else if (pos == nranks - 1) {
      prims.recv(dst + off, n, false);
    } else {
      prims.recvCopySend(dst + off, n);
    }
  }
}

// A chain up the ring ending at the root: the rank after the root starts it, the
// root applies the op's post() to the final value. `pos` is the distance downstream
// of the root (the root is 0, the chain's first rank is 1).
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void chainReduce(Prims& prims, int pos, int nranks, const T* sendbuff, T* recvbuff,
                                   ChannelRange range) {
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  if (nranks == 1) {
    prims.selfCopy(src, dst, range.count);
    return;
  }
  const size_t stepElems = prims.maxStepElems();
  for (size_t off = 0; off < range.count && prims.ok(); off += stepElems) {
    const size_t n = minSize(stepElems, range.count - off);
    if (pos == 1) {
      prims.send(src + off, n, true);
    } else if (pos == 0) {
      prims.recvReduceCopy(src + off, dst + off, n);
    } else {
      prims.recvReduceSend(src + off, n);
    }
  }
}

// Point to point: one direction of a peer connection, in slot-sized steps.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void p2pSend(Prims& prims, const T* sendbuff, size_t count) {
  prims.beginP2p(count * sizeof(T));
  const size_t stepElems = prims.maxStepElems();
  size_t off = 0;
  do {  // a zero-byte message still takes one step, so the receiver knows it came
    const size_t n = minSize(stepElems, count - off);
    prims.send(sendbuff + off, n, false);
    off += n;
  } while (off < count && prims.ok());
}

template <typename Prims, typename T>
CHORUS_HD_OUTLINE void p2pRecv(Prims& prims, T* recvbuff, size_t count) {
  prims.beginP2p(count * sizeof(T));
  const size_t stepElems = prims.maxStepElems();
  size_t off = 0;
  do {
    const size_t n = minSize(stepElems, count - off);
    prims.recv(recvbuff + off, n, false);
    off += n;
  } while (off < count && prims.ok());
}

}  // namespace chorus
