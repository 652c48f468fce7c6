// A GPU communicator's CUDA resources (gpu_executor.h's GpuComm): the image of its
// connections in device memory, the abort flag and kernel status in mapped host memory,
// its FIFO memory registered with the GPU, and pinned staging for each launch's work
// items, reused once the launch has completed (kept while a captured CUDA graph may
// replay it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "comm/comm.h"
#include "cuda/kernel_args.h"
#include "gpu/gpu_executor.h"

namespace chorus {

class CudaComm final : public GpuComm {
 public:
  // On the communicator's device. ncclUnhandledCudaError / ncclSystemError with a WARN.
  static ncclResult_t create(const ncclComm& comm, CudaComm** out);
  ~CudaComm() override;

  ncclResult_t launch(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                      const std::vector<cudaStream_t>& streams);
  ncclResult_t asyncError(const ncclComm& comm);
  void abort() { *reinterpret_cast<volatile uint32_t*>(abortHost_) = 1; }

 private:
  struct Staging {
    void* host = nullptr;  // pinned, mapped
    void* device = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the launch that uses it
    bool captured = false;       // part of a CUDA graph: never reused
  };
  CudaComm(int device, double timeoutSec) : device_(device), timeoutSec_(timeoutSec) {}
  ncclResult_t syncImage(ncclComm* comm);
  ncclResult_t stagingFor(size_t bytes, Staging** out);
  void waitForKernels();

  int device_;
  double timeoutSec_;
  cudaStream_t copyStream_ = nullptr;
  void* image_ = nullptr;  // device memory
  std::vector<std::byte> uploaded_;
  CommView view_{};
  KernelStatus* statusHost_ = nullptr;
  KernelStatus* statusDevice_ = nullptr;
  uint32_t* abortHost_ = nullptr;
  uint32_t* abortDevice_ = nullptr;
  struct Registered {
    void* base;  // FIFO memory, by start (HostRegistry)
    bool owned;  // this rank's memory (freed with its connections), not a P2P peer's
  };
  std::vector<Registered> registered_;
  std::vector<Staging> staging_;
  bool reported_ = false;
};

}  // namespace chorus
