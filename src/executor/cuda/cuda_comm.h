// A GPU communicator's CUDA resources (cuda_backend.h's GpuComm): the image of its
// connections in device memory, the abort flag and kernel status in mapped host memory,
// its FIFO memory registered with the GPU, and pinned staging for each launch's work
// items, reused once the launch has completed (kept while a captured CUDA graph may
// replay it).
//
// A group is staged first and launched after: everything that allocates or registers
// memory (which CUDA may order against kernels already running on the device) happens
// before any of the group's kernels starts, since ranks sharing a GPU need their kernels
// to run at the same time.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <vector>

#include "device/cuda/kernel_args.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_backend.h"

namespace chorus {

class CudaComm final : public GpuComm {
 public:
  // On the communicator's device. ncclUnhandledCudaError / ncclSystemError with a WARN.
  static ncclResult_t create(const ncclComm& comm, bool sharedGpu, CudaComm** out);
  ~CudaComm() override;

  ncclResult_t stage(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                     const std::vector<cudaStream_t>& streams) override;
  ncclResult_t flush(const ncclComm& comm, bool launch) override;
  ncclResult_t asyncError(const ncclComm& comm) override;
  void abort() override { *reinterpret_cast<volatile uint32_t*>(abortHost_) = 1; }
  uint64_t deviceBytes() const override { return imageBytes_.load(std::memory_order_relaxed); }

 private:
  struct Staging {
    void* host = nullptr;  // pinned, mapped
    void* device = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded right after the launch that uses it
    bool busy = false;           // staged, not launched yet
    bool captured = false;       // part of a CUDA graph: never reused
  };
  struct Staged {
    size_t staging;  // index in staging_
    const KernelLane* lanes;
    int nLanes;
    ncclDataType_t dtype;
    RedKind kind;
    std::vector<cudaStream_t> streams;
  };
  CudaComm(int device, double timeoutSec, bool sharedGpu)
      : device_(device), timeoutSec_(timeoutSec), sharedGpu_(sharedGpu) {}
  ncclResult_t syncImage(ncclComm* comm);
  ncclResult_t stagingFor(size_t bytes, size_t* index);
  ncclResult_t launch(const ncclComm& comm, const Staged& s);
  ncclResult_t stickyError(const ncclComm& comm);
  void waitForKernels();

  int device_;
  double timeoutSec_;
  bool sharedGpu_;  // another rank of this host uses the same GPU (CHORUS_ALLOW_SHARED_GPU)
  cudaStream_t copyStream_ = nullptr;
  void* image_ = nullptr;              // device memory
  std::atomic<size_t> imageBytes_{0};  // image_'s size; read from any thread (ncclCommMemStats)
  std::vector<std::byte> uploaded_;
  uint64_t uploadedVersion_ = 0;  // the communicator's viewVersion that uploaded_ shows
  CommView view_{};
  KernelStatus* statusHost_ = nullptr;
  KernelStatus* statusDevice_ = nullptr;
  uint32_t* abortHost_ = nullptr;
  uint32_t* abortDevice_ = nullptr;
  struct Registered {
    void* base;  // FIFO memory, by start (HostRegistry)
    bool owned;  // this rank's memory alone (freed with its connections), not P2P memory shared with a peer
  };
  std::vector<Registered> registered_;
  std::vector<Staging> staging_;
  std::vector<Staged> staged_;
  // This communicator's kernels run one after another whatever streams they are given:
  // they share the FIFOs and the GPU's step counters.
  cudaEvent_t lastKernel_ = nullptr;
  std::atomic<bool> lastKernelRecorded_{false};  // read by asyncError, from any thread
  std::atomic<bool> lastKernelInGraph_{false};   // ... last recorded by a captured launch
  std::atomic<bool> reported_{false};            // asyncError may be called from any thread
  bool warnedLegacyStream_ = false;
};

}  // namespace chorus
