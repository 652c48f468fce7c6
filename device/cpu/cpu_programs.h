// The CPU executor's program for one work item, for one protocol's primitives.
// Each protocol is instantiated (for every type and op) in its own translation unit,
// cpu_programs_<protocol>.cc, to keep compile times parallel and short.
#pragma once

#include <cstring>

#include "common/datatypes.h"
#include "common/ring_algorithms.h"
#include "common/tree_algorithms.h"
#include "common/work.h"
#include "core/debug.h"
#include "cpu/cpu_exec.h"

namespace chorus {

// Runs `w` with the primitives class template `Prims` (SimplePrimitives, LLPrimitives, ...).
void runSimpleItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);
void runLLItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);
void runLL128Item(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);

namespace programs {

inline int ringPosition(const CommView& comm, const ChannelView& ch, int root) {
  for (int k = 0; k < comm.nranks; ++k)
    if (ch.ringRanks[k] == root) return (comm.nranks - k) % comm.nranks;  // hops downstream of root
  return 0;
}

template <template <class, class, class> class Prims, typename T, typename Op>
void runItem(CpuExec& exec, const CommView& comm, const WorkItem& w, const Op& op) {
  using P = Prims<T, Op, CpuExec>;
  const T* send = static_cast<const T*>(w.sendbuff);
  T* recv = static_cast<T*>(w.recvbuff);
  switch (w.kind) {
    case WorkKind::LocalCopy: {
      P prims(exec, PeerSet(), PeerSet(), op);
      prims.selfCopy(send, recv, w.range.count);
      return;
    }
    case WorkKind::Send: {
      P prims(exec, PeerSet(), PeerSet(comm.p2pSend[w.root]), op);
      p2pSend(prims, send, w.range.count);
      return;
    }
    case WorkKind::Recv: {
      P prims(exec, PeerSet(comm.p2pRecv[w.root]), PeerSet(), op);
      p2pRecv(prims, recv, w.range.count);
      return;
    }
    default:
      break;
  }
  const ChannelView& ch = comm.channels[w.channel];
  if (w.kind == WorkKind::AllReduce && w.algo == Algorithm::Tree) {
    const TreeView& t = ch.tree;
    PeerSet children, childrenDown;
    for (int i = 0; i < t.nChildren; ++i) {
      children.add(t.recvUp[i]);
      childrenDown.add(t.sendDown[i]);
    }
    P up(exec, children, PeerSet(t.sendUp), op);
    P down(exec, PeerSet(t.recvDown), childrenDown, op);
    treeAllReduce(up, down, t.parent >= 0, t.nChildren > 0, send, recv, w.range);
    return;
  }
  P prims(exec, PeerSet(ch.ringRecv), PeerSet(ch.ringSend), op);
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
T scalarOf(const RedOpArgs& op) {
  T value{};
  const void* src = op.scalarPtr ? op.scalarPtr : &op.scalarBits;
  memcpy(&value, src, sizeof(T));
  return value;
}

// Type and op dispatch, then runItem with the protocol's primitives.
template <template <class, class, class> class Prims>
void dispatchItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  bool dispatched = dispatchType(w.dtype, [&](auto typeTag) {
    using T = decltype(typeTag);
    bool known = dispatchRedKind<T>(w.op.kind, scalarOf<T>(w.op), w.op.divisor,
                                    [&](const auto& op) { runItem<Prims, T>(exec, comm, w, op); });
    if (!known) {
      WARN("Rank %d: reduction kind %d is not available for %s", comm.rank, static_cast<int>(w.op.kind),
           typeName(w.dtype));
      ctx.setError(ncclInternalError);
    }
  });
  if (!dispatched) {
    WARN("Rank %d: data type %d has no executor program", comm.rank, static_cast<int>(w.dtype));
    ctx.setError(ncclInternalError);
  }
}

}  // namespace programs
}  // namespace chorus
