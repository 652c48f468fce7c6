#include "device/cpu/cpu_executor.h"

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

void runLane(Lane& lane) {
  CpuExec exec(*lane.ctx);
  const int savedRank = logRank();  // WARN lines name the lane's rank
  if (savedRank != lane.comm->rank) setLogRank(lane.comm->rank);
  for (const WorkItem& w : lane.items) {
    if (lane.ctx->failed()) break;
    runWorkItem(exec, *lane.ctx, *lane.comm, w);
  }
  if (savedRank != lane.comm->rank) setLogRank(savedRank);
}

}  // namespace

ncclResult_t runLanes(const std::vector<Lane*>& lanes) {
  if (lanes.size() == 1) {  // the common blocking call: no fiber, nothing to allocate
    runLane(*lanes[0]);
    return ncclSuccess;
  }
  std::vector<FiberScheduler::Task> tasks;
  tasks.reserve(lanes.size());
  for (Lane* lane : lanes) tasks.emplace_back([lane] { runLane(*lane); });
  if (!FiberScheduler::runAll(tasks)) return ncclSystemError;
  return ncclSuccess;
}

}  // namespace chorus
