// Ordered reductions, the deterministic mode's programs (CHORUS_DETERMINISTIC=1), written
// once for both executors.
//
// Spec: every element of AllReduce, Reduce and ReduceScatter is combined in one order,
// the ring's order from rank 0: ((x0 (+) x1) (+) x2) ... (+) x(n-1), with pre() applied to
// each rank's own value and post() once to the final one. That order does not depend on
// the call's size, an element's offset, the channel it falls in, the protocol or the
// step sizes, so the result's bits do not either. It holds when every channel has the
// same ring (init gives a deterministic communicator one ring order for all channels).
//
// How: a chain along the ring. The rank at hop 0 from rank 0 (rank 0 itself) sends its
// value, each later hop receives, combines its own and sends on, and hop n-1 holds the
// final value; from there the final value travels on around the ring (hop n-1 -> 0 -> 1
// ...) to the ranks that receive it: every rank (AllReduce), the root (Reduce) or the
// block's owner (ReduceScatter, one block after the other).
//
// Step order, the same on both ends of every link: step i's reduction, then the
// forwarding of step i - lag, where lag < the FIFO's slots. The lag keeps `lag` steps of
// the chain in flight while finals come back around; lag < slots is what keeps the ring
// from filling up all round (rank 0 would wait to send step m while hop n-1 waits to
// hand it final i with i + slots <= m; it cannot have produced final m - 1 >= i + slots
// - 1 without rank 0's step m - 1, so m - 1 < i + lag, which lag < slots rules out).
#pragma once

#include <cstddef>

#include "device/common/platform.h"
#include "device/common/ring_algorithms.h"  // divUp, minSize
#include "device/common/work.h"

namespace chorus {

// Hops from rank 0 downstream to `rank` on the channel's ring (`ring` as ring_algorithms.h).
CHORUS_HD int hopsFromRankZero(const int* ring, int nranks, int rank) {
  int self = 0, target = 0;
  for (int k = 0; k < nranks; ++k) {
    if (ring[k] == 0) self = (nranks - k) % nranks;  // rank 0 is k hops downstream of this rank
    if (ring[k] == rank) target = k;
  }
  return (self + target) % nranks;
}

constexpr int kEveryRank = -1;

// One rank's part in reducing `count` elements of `src` in ring order. `hop`: this rank's
// hops from rank 0; `dest`: the hop of the rank that gets the result (into `dst`), or
// kEveryRank. `lag`: steps between a step's reduction and its forwarding, < the slots.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void orderedReduce(Prims& prims, int hop, int nranks, const T* src, T* dst, size_t count, int dest,
                                     int lag) {
  if (nranks == 1) {
    prims.selfCopy(src, dst, count);
    return;
  }
  const int last = nranks - 1;
  const bool every = dest == kEveryRank;
  // Forwarding: the final value leaves hop `last` and stops at hop `end`.
  const bool forwards = every || dest != last;
  const int end = every ? last - 1 : dest;
  const size_t stepElems = prims.maxStepElems();
  const size_t steps = divUp(count, stepElems);
  if (!forwards) lag = 0;
  for (size_t i = 0; i < steps + static_cast<size_t>(lag) && prims.ok(); ++i) {
    if (i < steps) {
      const size_t off = i * stepElems, n = minSize(stepElems, count - off);
      if (hop == 0) {
        prims.send(src + off, n, true);
      } else if (hop < last) {
        prims.recvReduceSend(src + off, n);
      } else if (every) {
        prims.recvReduceCopySend(src + off, dst + off, n);  // post() applied once, here
      } else if (dest == last) {
        prims.recvReduceCopy(src + off, dst + off, n);
      } else {
        prims.recvReduceSend(src + off, n);  // the destination applies post()
      }
    }
    if (!forwards || i < static_cast<size_t>(lag) || hop > end) continue;
    const size_t j = i - lag, off = j * stepElems, n = minSize(stepElems, count - off);
    if (hop == end) {
      prims.recv(dst + off, n, !every);
    } else if (every) {
      prims.recvCopySend(dst + off, n);
    } else {
      prims.recvSend(n);
    }
  }
}

// AllReduce, Reduce and ReduceScatter of one channel in the ring's order (see above).
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void orderedCollective(Prims& prims, WorkKind kind, const int* ring, int nranks, const T* sendbuff,
                                         T* recvbuff, size_t blockStride, int root, ChannelRange range, int lag) {
  const int hop = hopsFromRankZero(ring, nranks, ring[0]);
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  switch (kind) {
    case WorkKind::AllReduce:
      orderedReduce(prims, hop, nranks, src, dst, range.count, kEveryRank, lag);
      break;
    case WorkKind::Reduce:
      orderedReduce(prims, hop, nranks, src, dst, range.count, hopsFromRankZero(ring, nranks, root), lag);
      break;
    case WorkKind::ReduceScatter:
      // Block b of every rank, reduced in order and delivered to rank b; blocks one by one.
      for (int b = 0; b < nranks && prims.ok(); ++b)
        orderedReduce(prims, hop, nranks, src + b * blockStride, dst, range.count, hopsFromRankZero(ring, nranks, b),
                      lag);
      break;
    default:
      break;
  }
}

}  // namespace chorus
