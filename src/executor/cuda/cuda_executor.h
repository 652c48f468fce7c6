// The CUDA executor as the rest of Chorus sees it: plain C++, no CUDA headers, so the
// host runtime builds the same with or without it. Everything of the CUDA executor's
// host side lives in this folder: the executor (cuda_executor.cc), how a group's calls
// become kernel runs (kernel_runs.h), the image of a communicator on the GPU
// (device_image.h), the GPU resources of a communicator (cuda_comm.h, CUDA builds) and
// the backend that says what this build has (cuda_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/common/work.h"
#include "nccl.h"
#include "src/executor/executor.h"
#include "transport/gpu_fifo_memory.h"
#include "transport/transport.h"

namespace chorus {

// Whether the CUDA executor can run here; false with `*why` saying what is missing
// (a build without nvcc, no driver, no GPU).
bool gpuExecutorAvailable(std::string* why);

// A CUDA executor for one communicator: its calls become kernels on the callers' streams.
std::unique_ptr<Executor> makeCudaExecutor();

// After the peers' information was all-gathered at init: two ranks of one host on one
// GPU, both GPU communicators, are ncclInvalidUsage on every rank alike, with a WARN
// naming them, unless CHORUS_ALLOW_SHARED_GPU=1 (NCCL refuses this: "Duplicate GPU
// detected"). Allowed, a WARN says what sharing risks: ranks of one process whose streams
// may share a hardware queue (CUDA_DEVICE_MAX_CONNECTIONS under 32), ranks of other
// processes whose kernels take turns without MPS.
ncclResult_t checkGpusNotShared(const ncclComm& comm);

// Another GPU communicator rank of the same host on the same GPU as `comm`'s rank (by PCI
// location where known, else by device number), or -1.
int sharedGpuPeer(const ncclComm& comm);

// How many lanes (thread blocks) of the collective kernel GPU `device` runs at once: what a
// GPU communicator's rank tells the others at init (PeerInfo::gpuLanes). 0 when not known
// (no CUDA executor, or the query failed with a WARN).
int gpuResidentLanes(int device);

// GPU `device`'s compute capability, major * 10 + minor (90 for Hopper), as NCCL numbers it;
// 0 when not known.
int gpuComputeCapability(int device);

// The most lanes one kernel of this communicator may have, the same on every rank (from the
// all-gathered PeerInfo): the fewest lanes any rank's GPU runs at once, divided among the
// GPU communicator ranks of the communicator on that GPU (their kernels run side by side).
// 0: no rank knows, no bound.
int kernelLaneBudget(const std::vector<PeerInfo>& peers);

// The calling thread's current CUDA device, 0 when there is none (as for a CPU-only run).
int currentCudaDevice();

// A number naming GPU `device`'s PCI location (nonzero), or 0 when unknown: ranks of one
// host compare these to find a shared GPU, since device numbers depend on
// CUDA_VISIBLE_DEVICES.
uint64_t gpuBusIdOf(int device);

// The CUDA device of this process at PCI location `busId` (gpuBusIdOf's numbering), or -1
// when it is not visible here (or the CUDA executor is absent).
int gpuOrdinalOf(uint64_t busId);

// ncclMemAlloc's device memory on the current CUDA device (`*device`), shareable as NCCL's:
// a cuMem allocation other processes import by file descriptor, which a NIC may register
// (GPUDirect RDMA) where the driver allows, else cudaMalloc's (shared by legacy IPC handle);
// from gpuFifoMemory(). False when the CUDA executor is absent (the caller then uses host
// memory); else `*result` says whether it was allocated (a WARN names the failure).
bool gpuMemAlloc(void** ptr, size_t bytes, int* device, ncclResult_t* result);
// Gives back what gpuMemAlloc returned on `device`.
void gpuMemFree(void* ptr, int device);

// Where GPU communicators' P2P FIFOs get GPU memory (transport/gpu_fifo_memory.h); null
// where the CUDA executor is absent.
const GpuFifoMemory* gpuFifoMemory();

// The entry points the executor uses, replaceable by tests: a stand-in lets the whole host
// path (executor choice, connections, kernel runs, launches) run on a machine without a GPU.
// `enqueue` stages `lanes` (the plan of one or more of `comm`'s calls, every item of one
// data type; `kind` Sum, or any other op for the run-time-op kernel) as one kernel for
// `streams[0]`, ordered after and before the work on the other streams.
struct GpuLaunchHooks {
  bool (*available)(std::string* why);
  ncclResult_t (*enqueue)(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                          const std::vector<cudaStream_t>& streams);
  const GpuFifoMemory* fifoMemory;                 // gpuFifoMemory()'s answer
  int (*residentLanes)(int device);                // gpuResidentLanes()'s answer; null: 0
  int (*computeCapability)(int device) = nullptr;  // gpuComputeCapability()'s answer; null: 0
};
// Replaces gpuExecutorAvailable and the staging of kernels for the process (nothing is
// then launched); nullptr restores them.
void setGpuLaunchHooksForTesting(const GpuLaunchHooks* hooks);

}  // namespace chorus
