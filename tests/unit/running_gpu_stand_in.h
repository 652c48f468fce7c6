// A stand-in for the GPU that runs what the CUDA executor stages: each staged kernel's
// lanes are kept (copied: the plan's lanes are reused by the next call), and a test then
// runs a rank's kernels one after the other, each kernel's lanes side by side on the CPU
// (as resident thread blocks run), with device/common's programs. Its FIFOs are host memory
// (or a stand-in's "GPU memory", which is host memory too).
#pragma once

#include <map>
#include <vector>

#include "device/cpu/lane_runner.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_executor.h"

namespace chorus::fixtures {

// The kernels each rank staged, in order.
inline std::map<int, std::vector<std::vector<Lane>>> gKernels;

// GpuLaunchHooks::enqueue.
inline ncclResult_t keepKernel(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t, RedKind,
                               const std::vector<cudaStream_t>&) {
  std::vector<Lane> kernel;
  for (const Lane* l : lanes) kernel.push_back(*l);
  gKernels[comm->rank].push_back(std::move(kernel));
  return ncclSuccess;
}

// Runs `kernels` for `comm`'s rank; the first failure ends it.
inline ncclResult_t runKernels(ncclComm* comm, const std::vector<std::vector<Lane>>& kernels, double timeoutSec) {
  ExecContext ctx;
  ctx.configure(&comm->abortFlag, &comm->revokeFlag, comm->rank, timeoutSec, comm->nranks);
  for (const std::vector<Lane>& kernel : kernels) {
    std::vector<HostLane> hostLanes;
    for (const Lane& l : kernel) hostLanes.push_back(HostLane{&l, &ctx});
    std::vector<const HostLane*> pointers;
    for (const HostLane& h : hostLanes) pointers.push_back(&h);
    CHORUS_CHECK(runHostLanes(pointers));
    if (ctx.failed()) return static_cast<ncclResult_t>(ctx.result.load());
  }
  return ncclSuccess;
}

}  // namespace chorus::fixtures
