#include "transport/shm_gpu_buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "core/process_liveness.h"

namespace chorus {
namespace {

// After the control block: whether the sender has the buffers mapped (written by the
// sender, read by a receiver that must not free legacy memory under it).
struct IpcShare {
  uint32_t imported;  // 1 while the sender's process has the buffers mapped
};
IpcShare* ipcShareOf(void* base) {
  return reinterpret_cast<IpcShare*>(static_cast<char*>(base) + sizeof(StepFifoControl));
}

// A receiver's segment and legacy GPU buffers that cannot be freed yet: the sender's
// process still has the buffers mapped.
struct PendingRelease {
  void* base;
  size_t bytes;
  GpuBuffers gpu;
  int peerAlive;
  uint64_t peerProcessId;
};
std::mutex& pendingMutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<PendingRelease>& pendingReleases() {
  static auto* list = new std::vector<PendingRelease>();  // never destroyed: used until exit
  return *list;
}

// Frees `r` unless a live sender (or one whose liveness cannot be watched) still has the
// buffers mapped; false if it must wait.
bool tryRelease(const PendingRelease& r) {
  const bool imported = __atomic_load_n(&ipcShareOf(r.base)->imported, __ATOMIC_ACQUIRE) != 0;
  if (imported && (r.peerAlive < 0 || peerAlive(r.peerAlive, r.peerProcessId))) return false;
  r.gpu.memory->release(r.gpu.device, r.gpu.address);
  munmap(r.base, r.bytes);
  closePeerLiveness(r.peerAlive);
  return true;
}

}  // namespace

size_t gpuFifoSegmentBytes() { return sizeof(StepFifoControl) + sizeof(IpcShare); }

ncclResult_t shareReceiverBuffers(const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
                                  const LinkContext& link, ConnectHandle* handle, GpuBuffers* out) {
  const GpuFifoMemory& memory = *link.gpuMemory;
  const size_t bytes = layout.buffersBytes();
  GpuBuffers gpu{&memory, self.cudaDev, nullptr, false, memory.sharedByFd(self.cudaDev)};
  std::string why;
  gpu.address = memory.allocate(self.cudaDev, bytes, true, &why);
  bool shared = gpu.address != nullptr;
  if (shared && gpu.byFd) {
    size_t allocated = 0;
    const int fd = memory.exportFd(gpu.address, &allocated, &why);
    shared = fd >= 0 && offerFd(fd, &gpu.ticket) == ncclSuccess;
    if (fd >= 0) close(fd);  // the offer holds its own duplicate
    if (fd >= 0 && !shared) why = "offering its file descriptor failed (see the WARN above)";
    handle->gpuBuffers = kGpuBuffersByFd;
    handle->gpuTicket = gpu.ticket;
    handle->gpuBytes = allocated;
  } else if (shared) {
    shared = memory.exportHandle(gpu.address, handle->gpuHandle, &why);
    handle->gpuBuffers = kGpuBuffersByHandle;
  }
  if (!shared) {
    WARN("SHM: the FIFO for data from rank %d in GPU memory of CUDA device %d (%zu bytes, CUDA IPC by %s): %s",
         peer.rank, self.cudaDev, bytes, gpu.byFd ? "file descriptor" : "legacy handle", why.c_str());
    if (gpu.address != nullptr) memory.release(self.cudaDev, gpu.address);
    return ncclUnhandledCudaError;
  }
  *out = gpu;
  return ncclSuccess;
}

ncclResult_t mapSenderBuffers(const ConnectHandle& handle, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out) {
  if (link.gpuMemory == nullptr) {
    WARN("SHM: rank %d's FIFO is GPU memory, but rank %d is not a GPU communicator", peer.rank, self.rank);
    return ncclInvalidUsage;
  }
  const GpuFifoMemory& memory = *link.gpuMemory;
  std::string why;
  void* mapped = nullptr;
  if (handle.gpuBuffers == kGpuBuffersByFd) {
    int fd = -1;
    const double timeout = static_cast<double>(envInt("CHORUS_BOOTSTRAP_TIMEOUT", 300));
    const ncclResult_t fetched = redeemFd(handle.gpuTicket, peer.rank, timeout, &fd);
    if (fetched != ncclSuccess) return fetched;  // redeemFd said why
    mapped = memory.importFd(self.cudaDev, fd, handle.gpuBytes, &why);
    close(fd);
  } else if (handle.gpuBuffers == kGpuBuffersByHandle) {
    mapped = memory.importHandle(self.cudaDev, handle.gpuHandle, &why);
  } else {
    WARN("SHM: rank %d shares its FIFO's GPU memory in an unknown way (%u)", peer.rank, handle.gpuBuffers);
    return ncclInternalError;
  }
  if (mapped == nullptr) {
    WARN(
        "SHM: rank %d (CUDA device %d) cannot map rank %d's FIFO in GPU memory through CUDA IPC: %s "
        "(NCCL_P2P_LEVEL=LOC keeps FIFOs in host memory)",
        self.rank, self.cudaDev, peer.rank, why.c_str());
    return ncclUnhandledCudaError;
  }
  __atomic_store_n(&ipcShareOf(base)->imported, 1, __ATOMIC_RELEASE);
  *out = GpuBuffers{&memory, self.cudaDev, mapped, true, handle.gpuBuffers == kGpuBuffersByFd};
  return ncclSuccess;
}

void letGoOfSegment(void* base, size_t bytes, const GpuBuffers& gpu, int peerAlive, uint64_t peerProcessId) {
  std::lock_guard<std::mutex> lock(pendingMutex());
  std::vector<PendingRelease>& pending = pendingReleases();
  const PendingRelease r{base, bytes, gpu, peerAlive, peerProcessId};
  if (gpu.memory != nullptr && !gpu.imported && !gpu.byFd) {
    if (!tryRelease(r)) pending.push_back(r);
  } else {
    // Nothing to wait for: a FIFO all in /dev/shm; the sender (it unmaps, then says so); or
    // a receiver's cuMem allocation, which lives on in the sender's mapping until that ends.
    if (gpu.memory != nullptr && gpu.imported) {
      gpu.memory->closeImported(gpu.device, gpu.address);
      __atomic_store_n(&ipcShareOf(base)->imported, 0, __ATOMIC_RELEASE);
    } else if (gpu.memory != nullptr) {
      withdrawFd(gpu.ticket);
      gpu.memory->release(gpu.device, gpu.address);
    }
    munmap(base, bytes);
    closePeerLiveness(peerAlive);
  }
  std::erase_if(pending, [](const PendingRelease& p) { return tryRelease(p); });
}

}  // namespace chorus
