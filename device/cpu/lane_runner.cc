#include "device/cpu/lane_runner.h"

#include "core/debug.h"
#include "device/cpu/cpu_programs.h"
#include "device/cpu/fiber_scheduler.h"

namespace chorus {
namespace {

void runWorkItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  switch (w.proto) {
    case Protocol::Simple:
      runSimpleItem(exec, ctx, comm, w);
      return;
    case Protocol::LL:
      runLLItem(exec, ctx, comm, w);
      return;
    case Protocol::LL128:
      runLL128Item(exec, ctx, comm, w);
      return;
  }
}

void markBroken(FifoEnd* end, BrokenCause cause) {
  if (end != nullptr && end->ctrl != nullptr) markBroken(end->ctrl, cause);
}

// A failed run tells every peer of its communicator at once, on every connection its lanes
// see: a peer waiting for it (in another process, or a lane of another communicator on this
// very thread, which would otherwise keep the launch from ending) fails now, not at its
// timeout.
// A mismatch of calls is the caller's error on every rank (ncclInvalidUsage), and says so.
void breakEveryEnd(const CommView& view, BrokenCause cause) {
  for (int c = 0; c < view.nChannels; ++c) {
    const ChannelView& ch = view.channels[c];
    markBroken(ch.ringRecv, cause);
    markBroken(ch.ringSend, cause);
    markBroken(ch.tree.sendUp, cause);
    markBroken(ch.tree.recvDown, cause);
    for (int i = 0; i < kMaxPeers; ++i) {
      markBroken(ch.tree.recvUp[i], cause);
      markBroken(ch.tree.sendDown[i], cause);
    }
  }
  for (int p = 0; p < view.nranks; ++p) {
    if (view.p2pSend) markBroken(view.p2pSend[p], cause);
    if (view.p2pRecv) markBroken(view.p2pRecv[p], cause);
  }
}

// One fiber's whole life: the lane's items in order, until one fails.
void runLaneToEnd(const HostLane& host) {
  const Lane& lane = *host.lane;
  CpuExec exec(*host.ctx);
  const ScopedLogContext logAs(lane.comm->rank, host.ctx->commName);  // WARN lines name the lane's rank
  for (const WorkItem& w : lane.items) {
    if (host.ctx->failed()) break;
    runWorkItem(exec, *host.ctx, *lane.comm, w);
  }
  if (host.ctx->failed() && !host.ctx->peersTold.exchange(true))
    breakEveryEnd(*lane.comm, host.ctx->result.load() == ncclInvalidUsage ? kBrokenByMismatch : kBrokenByPeer);
}

}  // namespace

ncclResult_t runHostLanes(const std::vector<const HostLane*>& lanes) {
  if (lanes.size() == 1) {  // the common blocking call: no fiber, nothing to allocate
    runLaneToEnd(*lanes[0]);
    return ncclSuccess;
  }
  std::vector<FiberScheduler::Task> tasks;
  tasks.reserve(lanes.size());
  for (const HostLane* lane : lanes) tasks.emplace_back([lane] { runLaneToEnd(*lane); });
  if (!FiberScheduler::runAll(tasks)) return ncclSystemError;
  return ncclSuccess;
}

}  // namespace chorus
