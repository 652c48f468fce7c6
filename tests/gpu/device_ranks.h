// Ranks sharing one GPU, wired by hand for the collective kernels: each rank's ring and
// chain-tree connections are FIFOs in device memory, its FifoEnds, channel view and work
// items are copied to the device, and each rank's kernel runs on its own stream, so the
// ranks' blocks run side by side as separate processes' kernels would.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/common/work.h"
#include "device/cuda/cuda_launch.h"
#include "device/cuda/kernel_args.h"

namespace chorus {
namespace gpu_test {

// Why the GPU tests cannot run here ("" when they can).
std::string gpuUnavailableReason();

// Owns one device (or mapped host) allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// A device copy of `count` host values (at least one element's room, so never null).
template <typename T>
DeviceBuffer upload(const T* host, size_t count) {
  DeviceBuffer buffer(sizeof(T) * (count > 0 ? count : 1));
  cudaMemcpy(buffer.get(), host, sizeof(T) * count, cudaMemcpyHostToDevice);
  return buffer;
}

// Host memory the GPU reads and writes directly (abort flags, kernel status).
template <typename T>
class MappedHost {
 public:
  MappedHost() {
    cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(T), cudaHostAllocMapped);
    new (host_) T{};
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0);
  }
  ~MappedHost() { cudaFreeHost(host_); }
  MappedHost(const MappedHost&) = delete;
  MappedHost& operator=(const MappedHost&) = delete;
  // Read once the GPU is done with it; written while a kernel runs only through volatile.
  T* host() { return host_; }
  T* device() { return device_; }

 private:
  T* host_ = nullptr;
  T* device_ = nullptr;
};

class DeviceRanks {
 public:
  // `slotBytes` per protocol (Simple, LL, LL128 in NCCL's order: LL, LL128, Simple).
  DeviceRanks(int nranks, const FifoLayout& layout);
  ~DeviceRanks();

  // Runs items[r] (one lane) on rank r. Waits up to `waitSec`, then aborts every rank.
  // True when every kernel finished without being aborted.
  bool run(const std::vector<WorkItem>& items, RedKind kind, double waitSec = 60, uint64_t timeoutNs = 0);
  // Only rank `r` runs `item`; the others run nothing. Aborts after `abortAfterSec` (< 0:
  // never). True once the kernel has finished (aborted or not); `*seconds` says when.
  bool runAlone(int r, const WorkItem& item, RedKind kind, double abortAfterSec, uint64_t timeoutNs, double* seconds);

  KernelStatus status(int r) const { return *status_[r]->host(); }
  int nranks() const { return n_; }

 private:
  struct Rank;
  bool launchAndWait(const std::vector<int>& ranks, const std::vector<WorkItem>& items, RedKind kind,
                     double abortAfterSec, uint64_t timeoutNs, double* seconds, bool* aborted);
  int n_;
  FifoLayout layout_;
  std::vector<DeviceBuffer> links_;  // ring r->r+1, up r->r-1, down r-1->r: 3 per rank
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::unique_ptr<MappedHost<KernelStatus>>> status_;
  std::vector<std::unique_ptr<MappedHost<uint32_t>>> abort_;
};

}  // namespace gpu_test
}  // namespace chorus
