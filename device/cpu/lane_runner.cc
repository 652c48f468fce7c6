#include "device/cpu/lane_runner.h"

#include "core/debug.h"
#include "device/common/break_ends.h"
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
    breakEveryEnd<CpuExec>(*lane.comm, brokenCauseOf(host.ctx->result.load()));
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
