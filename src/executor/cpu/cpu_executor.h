// The CPU executor behind the Executor seam: a group's calls become lanes (the plan's
// own form) that the calling thread runs with fibers (device/cpu), every communicator's
// lanes together. Host memory only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/cpu/lane_runner.h"
#include "src/executor/executor.h"

namespace chorus {

class CpuExecutor final : public Executor {
 public:
  // The waits of `rank`, as ExecContext::configure says.
  CpuExecutor(const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag, int rank,
              double timeoutSec, int localRanks);

  ncclResult_t stage(ncclComm* comm, const std::vector<CollOp>& ops, GroupLaunch& group) override;
  ncclResult_t launch(ncclComm*, bool) override { return ncclSuccess; }  // nothing asynchronous
  ncclResult_t runError() const override { return static_cast<ncclResult_t>(ctx_.result.load()); }
  ncclResult_t asyncError(ncclComm*) override { return ncclSuccess; }
  void abort() override {}  // waits watch the communicator's abort flag
  uint64_t gpuMemoryBytes() const override { return 0; }
  bool runsOnCallingThread() const override { return true; }

 private:
  ExecContext ctx_;
  std::vector<Lane*> lanes_;         // the latest stage's lanes (the communicator's plan)
  std::vector<HostLane> hostLanes_;  // the same with ctx_, handed to the group
};

}  // namespace chorus
