// The CUDA executor as the host runtime sees it: plain C++, no CUDA headers, so the
// runtime builds the same with or without it. cuda_executor.cc implements it when
// the build has nvcc (CHORUS_HAVE_CUDA); no_cuda_executor.cc says it is absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/common/reduce_ops.h"
#include "device/cpu/cpu_executor.h"
#include "nccl.h"

struct ncclComm;

namespace chorus {

// A GPU communicator's resources: its image on the GPU, the mapped abort flag and
// status, the FIFO memory it registered, its launch staging. Destroying it waits for
// the communicator's kernels to end (abort first to make them end).
class GpuComm {
 public:
  virtual ~GpuComm() = default;
};

// Whether the CUDA executor can run here; false with `*why` saying what is missing
// (a build without nvcc, no driver, no GPU).
bool gpuExecutorAvailable(std::string* why);

// The calling thread's current CUDA device, 0 when there is none (as for a CPU-only run).
int currentCudaDevice();

// Stages `lanes` (the plan of one or more of `comm`'s calls, every item of one data type;
// `kind` Sum, or any other op for the run-time-op kernel) as one kernel for `streams[0]`,
// to be ordered after and before the work on the other streams. Creates comm->gpu on
// first use. Nothing runs until gpuFlush. Errors come with a WARN.
ncclResult_t gpuEnqueue(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                        const std::vector<cudaStream_t>& streams);
// Launches what gpuEnqueue staged for `comm` (or, `launch` false, drops it) and returns
// at once. A group stages every communicator's kernels before flushing any.
ncclResult_t gpuFlush(ncclComm* comm, bool launch);

// A number naming GPU `device`'s PCI location (nonzero), or 0 when unknown: ranks of one
// host compare these to find a shared GPU, since device numbers depend on
// CUDA_VISIBLE_DEVICES.
uint64_t gpuBusIdOf(int device);

// The first failure a kernel of `comm` recorded (ncclSuccess when none, or not a GPU
// communicator); the first time it is seen, a WARN names the cause, peer and block.
ncclResult_t gpuAsyncError(ncclComm* comm);

// Makes `comm`'s running and future kernels stop waiting.
void gpuAbort(ncclComm* comm);

// The two entry points the planner uses, replaceable by tests: a stand-in executor lets the
// whole host path (executor choice, kernel runs, launches) run on a machine without a GPU.
struct GpuLaunchHooks {
  bool (*available)(std::string* why);
  ncclResult_t (*enqueue)(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                          const std::vector<cudaStream_t>& streams);
};
// Replaces gpuExecutorAvailable and gpuEnqueue for the process (gpuFlush then does
// nothing); nullptr restores them.
void setGpuLaunchHooksForTesting(const GpuLaunchHooks* hooks);

// ncclMemAlloc/ncclMemFree's device memory; false when the CUDA executor is absent
// (the caller then uses host memory).
bool gpuMemAlloc(void** ptr, size_t bytes, ncclResult_t* result);
bool gpuMemFree(void* ptr, ncclResult_t* result);

}  // namespace chorus
