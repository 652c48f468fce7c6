// What this build's CUDA runtime side provides to the CUDA executor: cuda_runtime_backend.cc
// where the build has nvcc (CHORUS_HAVE_CUDA), no_cuda_backend.cc where it says it is absent.
// Both also implement cuda_executor.h's currentCudaDevice, gpuBusIdOf and gpuMem*.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/executor/cuda/cuda_executor.h"

namespace chorus {

// A GPU communicator's CUDA resources (cuda_comm.h): its image on the GPU, the mapped abort
// flag and status, the FIFO memory it registered, its launch staging. Destroying it waits
// for the communicator's kernels to end (abort first to make them end).
class GpuComm {
 public:
  virtual ~GpuComm() = default;
  // Stages one kernel (GpuLaunchHooks::enqueue's contract); nothing runs until flush.
  virtual ncclResult_t stage(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                             const std::vector<cudaStream_t>& streams) = 0;
  // Launches everything staged (`launch` false: drops it) and returns at once.
  virtual ncclResult_t flush(const ncclComm& comm, bool launch) = 0;
  // The first failure a kernel recorded; the first time it is seen, a WARN names the
  // cause, peer and block. Any thread.
  virtual ncclResult_t asyncError(const ncclComm& comm) = 0;
  // Makes running and future kernels stop waiting. Any thread.
  virtual void abort() = 0;
  // The device memory it holds (cudaMalloc), in bytes.
  virtual uint64_t deviceBytes() const = 0;
};

bool backendAvailable(std::string* why);
// gpuResidentLanes, for the backend's GPUs.
int backendResidentLanes(int device);
// gpuComputeCapability, for the backend's GPUs.
int backendComputeCapability(int device);
// The GPU memory of P2P FIFOs (cudaMalloc, peer access); null without the CUDA executor.
const GpuFifoMemory* backendFifoMemory();
// `comm`'s resources on its device; `sharedGpu`: another rank of the host uses it too.
// Errors come with a WARN.
ncclResult_t createGpuComm(const ncclComm& comm, bool sharedGpu, std::unique_ptr<GpuComm>* out);

}  // namespace chorus
