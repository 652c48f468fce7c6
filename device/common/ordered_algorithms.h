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
// block's owner (ReduceScatter: the blocks one after the other, in one stream of steps).
//
// A small AllReduce (ring_algorithms.h's gathers()) instead gathers every rank's value
// and folds them in this order on each rank: gatherAllReduce, n-1 hops instead of 2(n-1).
//
// Step order, the same on both ends of every link: step i's reduction, then the
// forwarding of step i - lag, where 0 <= lag < the FIFO's slots S. The lag keeps steps of
// the chain in flight while finals come back around. lag < S is what keeps the ring from
// filling up all round: that needs rank 0 stuck sending reduction m (its link full)
// while hop n-1 is stuck handing it final i (S finals, i .. i+S-1, sent and unread).
// Rank 0 reads final i right after reduction i + lag, so m <= i + lag; and final i+S-1
// needed rank 0's reduction i+S-1 < m. So S <= lag, which lag < S rules out.
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

// Whether a call runs the ordered programs: a reduction on a communicator in deterministic
// mode. With two ranks every element is one op of the two values, and sums and products
// (pre() and post() included) are commutative bit for bit, so every algorithm already gives
// the fold's bits; max and min choose between two NaNs by operand order (their payloads).
// The plan (which reports the ring) and runItem (which runs the programs) both ask here.
CHORUS_HD bool runsOrdered(bool deterministic, WorkKind kind, int nranks, RedKind op) {
  return deterministic && combinesValues(kind) && (nranks > 2 || op == RedKind::Max || op == RedKind::Min);
}

constexpr int kEveryRank = -1;

// One step's worth of an ordered reduction: `n` elements of this rank's `src`, reduced in
// ring order and delivered to `dst` on the rank at hop `dest` (kEveryRank: on every rank).
template <typename T>
struct OrderedUnit {
  const T* src;
  T* dst;
  size_t n;
  int dest;
};

// One rank's part in reducing units 0 .. units-1 (`unitAt(i)`, the same sequence on every
// rank) in ring order. `hop`: this rank's hops from rank 0. `lag`: steps between a unit's
// reduction and its forwarding, < the FIFO's slots.
template <typename Prims, typename UnitAt>
CHORUS_HD_OUTLINE void orderedReduce(Prims& prims, int hop, int nranks, size_t units, const UnitAt& unitAt, int lag) {
  const int last = nranks - 1;
  for (size_t i = 0; i < units + static_cast<size_t>(lag) && prims.ok(); ++i) {
    if (i < units) {
      const auto u = unitAt(i);
      if (hop == 0) {
        prims.send(u.src, u.n, true);
      } else if (hop < last) {
        prims.recvReduceSend(u.src, u.n);
      } else if (u.dest == kEveryRank) {
        prims.recvReduceCopySend(u.src, u.dst, u.n);  // post() applied once, here
      } else if (u.dest == last) {
        prims.recvReduceCopy(u.src, u.dst, u.n);
      } else {
        prims.recvReduceSend(u.src, u.n);  // on to the destination, which applies post()
      }
    }
    if (i < static_cast<size_t>(lag)) continue;
    const auto u = unitAt(i - lag);
    const bool every = u.dest == kEveryRank;
    const int end = every ? last - 1 : u.dest;                 // the final value travels hop last -> 0 -> ... -> end
    if (hop == last || hop > end || u.dest == last) continue;  // past the destination, or nothing travels
    if (hop == end) {
      prims.recv(u.dst, u.n, !every);
    } else if (every) {
      prims.recvCopySend(u.dst, u.n);
    } else {
      prims.recvSend(u.n);
    }
  }
}

// AllReduce, Reduce and ReduceScatter of one channel in the ring's order (see above). A
// ReduceScatter's units run block after block (block b's final goes to rank b) in one
// stream, so the blocks pipeline like the steps of one block.
template <typename Prims, typename T>
CHORUS_HD_OUTLINE void orderedCollective(Prims& prims, WorkKind kind, const int* ring, int nranks, const T* sendbuff,
                                         T* recvbuff, size_t blockStride, int root, ChannelRange range, int lag) {
  const T* src = sendbuff + range.offset;
  T* dst = recvbuff + range.offset;
  if (nranks == 1) {
    prims.selfCopy(src, dst, range.count);
    return;
  }
  if constexpr (Prims::kTeamOfOne) {
    if (kind == WorkKind::AllReduce && gathers<T>(prims, nranks, range.count)) {
      gatherAllReduce(prims, ring, nranks, src, dst, range.count);  // folds in this very order, in n-1 hops
      return;
    }
  }
  const size_t stepElems = prims.maxStepElems();
  const size_t steps = divUp(range.count, stepElems);
  const bool scatter = kind == WorkKind::ReduceScatter;
  const int fixedDest = kind == WorkKind::AllReduce ? kEveryRank : hopsFromRankZero(ring, nranks, root);
  auto unitAt = [&](size_t i) {
    const size_t block = i / steps, off = (i % steps) * stepElems;
    const int dest = scatter ? hopsFromRankZero(ring, nranks, static_cast<int>(block)) : fixedDest;
    return OrderedUnit<T>{src + block * blockStride + off, dst + off, minSize(stepElems, range.count - off), dest};
  };
  const size_t units = steps * (scatter ? nranks : 1);
  orderedReduce(prims, hopsFromRankZero(ring, nranks, ring[0]), nranks, units, unitAt, lag);
}

}  // namespace chorus
