#include "src/executor/cpu/cpu_executor.h"

#include "core/debug.h"
#include "src/comm/comm.h"
#include "src/enqueue/plan.h"
#include "src/report/hang_report.h"

namespace chorus {

CpuExecutor::CpuExecutor(const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag, int rank,
                         double timeoutSec, int localRanks) {
  ctx_.configure(abortFlag, revokeFlag, rank, timeoutSec, localRanks);
}

ncclResult_t CpuExecutor::stage(ncclComm* comm, const std::vector<CollOp>& ops, GroupLaunch& group) {
  ctx_.commName = comm->config.commName;
  if (!ctx_.reportStuck)  // the communicator owns this executor: it outlives every wait
    ctx_.reportStuck = [comm](const char* why, const std::string& stuck) { writeHangReport(*comm, why, stuck); };
  lanes_.clear();
  CHORUS_CHECK(buildLanes(comm, ops, &lanes_));
  // Filled whole before any pointer into it is handed out: the vector may grow.
  hostLanes_.clear();
  for (const Lane* lane : lanes_) hostLanes_.push_back(HostLane{lane, &ctx_});
  for (const HostLane& lane : hostLanes_) group.addHostLane(&lane);
  return ncclSuccess;
}

}  // namespace chorus
