// The program for one work item, written once for both executors: the item's
// algorithm run over a protocol's primitives (SimplePrimitives, LLPrimitives, ...).
// Executors choose the type, op and protocol, then call runItem for each item of a lane.
#pragma once

#include <cstddef>

#include "device/common/board.h"
#include "device/common/ordered_algorithms.h"
#include "device/common/platform.h"
#include "device/common/ring_algorithms.h"
#include "device/common/tree_algorithms.h"
#include "device/common/work.h"

namespace chorus {

namespace programs {

CHORUS_HD int ringPosition(const CommView& comm, const ChannelView& ch, int root) {
  for (int k = 0; k < comm.nranks; ++k)
    if (ch.ringRanks[k] == root) return (comm.nranks - k) % comm.nranks;  // hops downstream of root
  return 0;
}

template <template <class, class, class> class Prims, typename T, typename Op, typename Exec>
CHORUS_HD_OUTLINE void runItem(Exec& exec, const CommView& comm, const WorkItem& w, const Op& op) {
  using P = Prims<T, Op, Exec>;
  const T* send = static_cast<const T*>(w.sendbuff);
  T* recv = static_cast<T*>(w.recvbuff);
  switch (w.kind) {
    case WorkKind::LocalCopy: {
      P prims(exec, PeerSet(), PeerSet(), op, w.stamp);
      prims.selfCopy(send, recv, w.range.count);
      return;
    }
    case WorkKind::Send: {
      P prims(exec, PeerSet(), PeerSet(comm.p2pSend[w.root]), op, w.stamp);
      p2pSend(prims, send, w.range.count);
      return;
    }
    case WorkKind::Recv: {
      P prims(exec, PeerSet(comm.p2pRecv[w.root]), PeerSet(), op, w.stamp, w.recvOffered ? recv : nullptr);
      p2pRecv(prims, recv, w.range.count);
      return;
    }
    default:
      break;
  }
  const ChannelView& ch = comm.channels[w.channel];
  if (w.board) {  // an AllReduce small enough for the board (board.h); the ring's ends announce it
    if constexpr (BoardRunner<Exec>) {
      P prims(exec, PeerSet(ch.ringRecv), PeerSet(ch.ringSend), op, w.stamp);
      boardAllReduce(exec, prims, op, comm.board, ch, comm.nranks, send + w.range.offset, recv + w.range.offset,
                     w.range.count, w.stamp);
    }
    return;  // otherwise a run that counts steps (step_counts.h): the board moves none on a connection
  }
  if (runsOrdered(comm.ordered, w.kind, comm.nranks, w.op.kind)) {  // deterministic mode (ordered_algorithms.h)
    P prims(exec, PeerSet(ch.ringRecv), PeerSet(ch.ringSend), op, w.stamp);
    // A communicator of one rank has no ring ends (orderedCollective only copies).
    const int lag = comm.nranks == 1
                        ? 0
                        : (ch.ringSend->nSlots < ch.ringRecv->nSlots ? ch.ringSend->nSlots : ch.ringRecv->nSlots) - 1;
    orderedCollective(prims, w.kind, ch.ringRanks, comm.nranks, send, recv, w.blockCount, w.root, w.range, lag);
    return;
  }
  if (w.kind == WorkKind::AllReduce && w.algo == Algorithm::Tree) {
    const TreeView& t = ch.tree;
    PeerSet children, childrenDown;
    for (int i = 0; i < t.nChildren; ++i) {
      children.add(t.recvUp[i]);
      childrenDown.add(t.sendDown[i]);
    }
    P up(exec, children, PeerSet(t.sendUp), op, w.stamp);
    P down(exec, PeerSet(t.recvDown), childrenDown, op, w.stamp);
    treeAllReduce(up, down, t.parent >= 0, t.nChildren > 0, send, recv, w.range);
    return;
  }
  P prims(exec, PeerSet(ch.ringRecv), PeerSet(ch.ringSend), op, w.stamp);
  switch (w.kind) {
    case WorkKind::AllReduce:
      ringAllReduce(prims, ch.ringRanks, comm.nranks, send, recv, w.range);
      break;
    case WorkKind::ReduceScatter:
      ringReduceScatter(prims, ch.ringRanks, comm.nranks, send, recv, w.blockCount, w.range);
      break;
    case WorkKind::AllGather:
      ringAllGather(prims, ch.ringRanks, comm.nranks, send, recv, w.blockCount, w.range);
      break;
    case WorkKind::Broadcast:
      chainBroadcast(prims, ringPosition(comm, ch, w.root), comm.nranks, send, recv, w.range);
      break;
    case WorkKind::Reduce:
      chainReduce(prims, ringPosition(comm, ch, w.root), comm.nranks, send, recv, w.range);
      break;
    default:
      break;
  }
}

template <typename T>
CHORUS_HD T scalarOf(const RedOpArgs& op) {
  T value{};
  const void* src = op.scalarPtr ? op.scalarPtr : &op.scalarBits;
  __builtin_memcpy(&value, src, sizeof(T));
  return value;
}

}  // namespace programs
}  // namespace chorus
