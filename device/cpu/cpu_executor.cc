#include "cpu/cpu_executor.h"

#include <cstring>

#include "common/datatypes.h"
#include "common/ring_algorithms.h"
#include "common/simple_primitives.h"
#include "core/debug.h"
#include "cpu/fiber_scheduler.h"

namespace chorus {
namespace {

int ringPosition(const CommView& comm, const ChannelView& ch, int root) {
  for (int k = 0; k < comm.nranks; ++k)
    if (ch.ringRanks[k] == root) return (comm.nranks - k) % comm.nranks;  // hops downstream of root
  return 0;
}

template <typename T, typename Op>
void runItem(CpuExec& exec, const CommView& comm, const WorkItem& w, const Op& op) {
  const T* send = static_cast<const T*>(w.sendbuff);
  T* recv = static_cast<T*>(w.recvbuff);
  if (w.kind == WorkKind::LocalCopy) {
    SimplePrimitives<T, Op, CpuExec> prims(exec, nullptr, nullptr, op);
    prims.selfCopy(send, recv, w.range.count);
    return;
  }
  if (w.kind == WorkKind::Send || w.kind == WorkKind::Recv) {
    if (w.kind == WorkKind::Send) {
      SimplePrimitives<T, Op, CpuExec> prims(exec, nullptr, comm.p2pSend[w.root], op);
      p2pSend(prims, send, w.range.count);
    } else {
      SimplePrimitives<T, Op, CpuExec> prims(exec, comm.p2pRecv[w.root], nullptr, op);
      p2pRecv(prims, recv, w.range.count);
    }
    return;
  }
  const ChannelView& ch = comm.channels[w.channel];
  SimplePrimitives<T, Op, CpuExec> prims(exec, ch.ringRecv, ch.ringSend, op);
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

void runWorkItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  bool dispatched = dispatchType(w.dtype, [&](auto typeTag) {
    using T = decltype(typeTag);
    bool known = dispatchRedKind<T>(w.op.kind, scalarOf<T>(w.op), w.op.divisor,
                                    [&](const auto& op) { runItem<T>(exec, comm, w, op); });
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

}  // namespace

ncclResult_t runLanes(std::vector<Lane>& lanes) {
  std::vector<FiberScheduler::Task> tasks;
  tasks.reserve(lanes.size());
  for (Lane& lane : lanes) {
    tasks.emplace_back([&lane] {
      CpuExec exec(*lane.ctx);
      const int savedRank = logRank();
      setLogRank(lane.comm->rank);
      for (const WorkItem& w : lane.items) {
        if (lane.ctx->failed()) break;
        runWorkItem(exec, *lane.ctx, *lane.comm, w);
      }
      setLogRank(savedRank);
    });
  }
  if (!FiberScheduler::runAll(tasks)) return ncclSystemError;
  return ncclSuccess;
}

}  // namespace chorus
