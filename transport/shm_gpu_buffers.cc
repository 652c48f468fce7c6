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
#include "transport/set_up_wait.h"

namespace chorus {
namespace {

// After the control block: what each side has mapped of the other's GPU memory, and under
// P2P read how the sender shares its Simple slots.
enum SlotsShared : uint32_t { kSlotsPending = 0, kSlotsByFd = 1, kSlotsByHandle = 2, kSlotsFailed = 3 };
// An IpcShare word saying whether the other side maps this side's memory. The mapping side
// claims the memory before it starts mapping, and the owner frees a legacy allocation only
// after withdrawing it while unclaimed: never under a mapping in progress (CUDA's undefined
// case), and a claim that comes after the withdrawal fails instead of mapping freed memory.
enum MappingState : uint32_t { kUnmapped = 0, kMapped = 1, kWithdrawn = 2 };
struct IpcShare {
  uint32_t imported;       // MappingState of the receiver's buffers in the sender's process
  uint32_t slotsImported;  // MappingState of the sender's Simple slots in the receiver's process
  uint32_t slotsShared;    // SlotsShared: stored last, with release, once the fields below hold
  uint32_t pad;
  FdTicket slotsTicket;
  uint64_t slotsBytes;
  char slotsHandle[GpuFifoMemory::kIpcHandleBytes];
};
IpcShare* ipcShareOf(void* base) {
  return reinterpret_cast<IpcShare*>(static_cast<char*>(base) + sizeof(StepFifoControl));
}
// The word saying whether the peer has `held` mapped (the owner's side) or that this side
// has (the mapping's side).
uint32_t* importedFlag(void* base, const GpuBuffers& held) {
  return held.slots ? &ipcShareOf(base)->slotsImported : &ipcShareOf(base)->imported;
}

// Allocates `bytes` of shareable memory on `device` and shares it: by file descriptor
// (`gpu->ticket`, the allocation's size in `*allocated`) where the driver can, else by a
// legacy handle written to `handle`. False with `*why`, nothing left allocated.
bool allocateShared(const GpuFifoMemory& memory, int device, size_t bytes, GpuBuffers* gpu, uint64_t* allocated,
                    char (&handle)[GpuFifoMemory::kIpcHandleBytes], std::string* why) {
  *gpu = GpuBuffers{&memory, device, nullptr, false, memory.sharedByFd(device)};
  gpu->address = memory.allocate(device, bytes, true, why);
  bool shared = gpu->address != nullptr;
  if (shared && gpu->byFd) {
    size_t size = 0;
    const int fd = memory.exportFd(gpu->address, &size, why);
    shared = fd >= 0 && offerFd(fd, &gpu->ticket) == ncclSuccess;
    if (fd >= 0) close(fd);  // the offer holds its own duplicate
    if (fd >= 0 && !shared) *why = "offering its file descriptor failed (see the WARN above)";
    *allocated = size;
  } else if (shared) {
    shared = memory.exportHandle(gpu->address, handle, why);
  }
  if (!shared && gpu->address != nullptr) memory.release(device, gpu->address);
  return shared;
}

// Maps memory another process shared by descriptor (`ticket`, `bytes`) or legacy handle
// for this process's GPU `device`; null with the cause said: a WARN from the fd handout
// (`*fetched` its error) or `*why`.
// `bytes`: the allocation's size as the peer announced it, which must cover the `needed`
// bytes this side will touch (a smaller one would map, and the kernels would fault past it;
// a larger one than the allocation fails to map). A legacy handle carries no size.
// `state`: the MappingState word of this memory, claimed here before the mapping starts
// (and given back if it fails).
void* importShared(const GpuFifoMemory& memory, int device, bool byFd, const FdTicket& ticket, uint64_t bytes,
                   size_t needed, const char (&handle)[GpuFifoMemory::kIpcHandleBytes], int peerRank, uint32_t* state,
                   ncclResult_t* fetched, std::string* why) {
  *fetched = ncclSuccess;
  if (byFd && bytes < needed) {
    WARN("SHM: rank %d announced %llu bytes of GPU memory where its FIFO needs %zu", peerRank,
         static_cast<unsigned long long>(bytes), needed);
    *fetched = ncclRemoteError;
    return nullptr;
  }
  uint32_t unmapped = kUnmapped;
  if (!__atomic_compare_exchange_n(state, &unmapped, kMapped, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    WARN("SHM: rank %d let go of its GPU memory before this rank could map it (its communicator ended)", peerRank);
    *fetched = ncclRemoteError;
    return nullptr;
  }
  void* mapped = nullptr;
  if (!byFd) {
    mapped = memory.importHandle(device, handle, why);
  } else {
    int fd = -1;
    const double timeout = static_cast<double>(bootstrapTimeoutSeconds());
    *fetched = redeemFd(ticket, peerRank, timeout, &fd);  // redeemFd says why it failed
    if (*fetched == ncclSuccess) {
      mapped = memory.importFd(device, fd, bytes, why);
      close(fd);
    }
  }
  if (mapped == nullptr) __atomic_store_n(state, kUnmapped, __ATOMIC_RELEASE);
  return mapped;
}

// Lets go of what one side holds: a mapping is closed and said so; an allocation is freed,
// but for legacy memory still mapped by a live peer (false: later). Held memory let go of
// is forgotten (memory null).
bool letGo(void* base, GpuBuffers& held, int peerAliveFd, uint64_t peerProcessId) {
  if (held.memory == nullptr) return true;
  uint32_t* flag = importedFlag(base, held);
  if (held.imported) {
    held.memory->closeImported(held.device, held.address);
    __atomic_store_n(flag, kUnmapped, __ATOMIC_RELEASE);
  } else if (held.byFd) {
    withdrawFd(held.ticket);
    held.memory->release(held.device, held.address);  // lives on in the peer's mapping until that ends
  } else {
    uint32_t state = kUnmapped;
    const bool withdrawn =
        __atomic_compare_exchange_n(flag, &state, kWithdrawn, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (!withdrawn && state == kMapped && (peerAliveFd < 0 || peerAlive(peerAliveFd, peerProcessId))) return false;
    held.memory->release(held.device, held.address);
  }
  held.memory = nullptr;
  return true;
}

// A segment whose GPU memory cannot all be let go of yet: a legacy allocation the peer's
// process still has mapped (freeing it under the peer's kernels would fault its GPU
// context). Later releases look at it again.
struct PendingRelease {
  void* base;
  size_t bytes;
  GpuBuffers held[2];  // the buffers and the Simple slots, either possibly none
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

// Lets go of what it can of `r`; true (and the segment unmapped) once all of it is gone.
bool tryRelease(PendingRelease& r) {
  bool done = true;
  for (GpuBuffers& held : r.held) done = letGo(r.base, held, r.peerAlive, r.peerProcessId) && done;
  if (!done) return false;
  munmap(r.base, r.bytes);
  closePeerLiveness(r.peerAlive);
  return true;
}

}  // namespace

size_t gpuFifoSegmentBytes() { return sizeof(StepFifoControl) + sizeof(IpcShare); }

ncclResult_t shareReceiverBuffers(const FifoLayout& layout, bool slotsOnSender, const PeerInfo& self,
                                  const PeerInfo& peer, const LinkContext& link, ConnectHandle* handle,
                                  GpuBuffers* out) {
  const size_t bytes = layout.receiverBuffersBytes(slotsOnSender);
  GpuBuffers gpu;
  uint64_t allocated = 0;
  std::string why;
  if (!allocateShared(*link.gpuMemory, self.cudaDev, bytes, &gpu, &allocated, handle->gpuHandle, &why)) {
    WARN("SHM: the FIFO for data from rank %d in GPU memory of CUDA device %d (%zu bytes, CUDA IPC by %s): %s",
         peer.rank, self.cudaDev, bytes, gpu.byFd ? "file descriptor" : "legacy handle", why.c_str());
    return ncclUnhandledCudaError;
  }
  handle->gpuBuffers = gpu.byFd ? kGpuBuffersByFd : kGpuBuffersByHandle;
  handle->gpuTicket = gpu.ticket;
  handle->gpuBytes = allocated;
  *out = gpu;
  return ncclSuccess;
}

ncclResult_t mapSenderBuffers(const ConnectHandle& handle, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out) {
  if (link.gpuMemory == nullptr) {
    WARN("SHM: rank %d's FIFO is GPU memory, but rank %d is not a GPU communicator", peer.rank, self.rank);
    return ncclInvalidUsage;
  }
  if (handle.gpuBuffers != kGpuBuffersByFd && handle.gpuBuffers != kGpuBuffersByHandle) {
    WARN("SHM: rank %d shares its FIFO's GPU memory in an unknown way (%u)", peer.rank, handle.gpuBuffers);
    return ncclInternalError;
  }
  const bool byFd = handle.gpuBuffers == kGpuBuffersByFd;
  ncclResult_t fetched;
  std::string why;
  void* mapped = importShared(*link.gpuMemory, self.cudaDev, byFd, handle.gpuTicket, handle.gpuBytes,
                              handle.layout.receiverBuffersBytes(handle.slotsOnSender != 0), handle.gpuHandle,
                              peer.rank, &ipcShareOf(base)->imported, &fetched, &why);
  if (fetched != ncclSuccess) return fetched;
  if (mapped == nullptr) {
    WARN(
        "SHM: rank %d (CUDA device %d) cannot map rank %d's FIFO in GPU memory through CUDA IPC: %s "
        "(NCCL_P2P_LEVEL=LOC keeps FIFOs in host memory)",
        self.rank, self.cudaDev, peer.rank, why.c_str());
    return ncclUnhandledCudaError;
  }
  *out = GpuBuffers{link.gpuMemory, self.cudaDev, mapped, true, byFd};
  return ncclSuccess;
}

ncclResult_t shareSenderSlots(const FifoLayout& layout, void* base, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, GpuBuffers* out) {
  IpcShare* share = ipcShareOf(base);
  const size_t bytes = layout.simpleSlotsBytes();
  GpuBuffers gpu;
  uint64_t allocated = 0;
  std::string why = "it is not a GPU communicator";
  if (link.gpuMemory == nullptr ||
      !allocateShared(*link.gpuMemory, self.cudaDev, bytes, &gpu, &allocated, share->slotsHandle, &why)) {
    sayNoSenderSlots(base);
    WARN("SHM: rank %d's Simple slots for data to rank %d in GPU memory of CUDA device %d (%zu bytes, P2P read): %s",
         self.rank, peer.rank, self.cudaDev, bytes, why.c_str());
    return link.gpuMemory == nullptr ? ncclInvalidUsage : ncclUnhandledCudaError;
  }
  gpu.slots = true;
  share->slotsTicket = gpu.ticket;
  share->slotsBytes = allocated;
  __atomic_store_n(&share->slotsShared, gpu.byFd ? kSlotsByFd : kSlotsByHandle, __ATOMIC_RELEASE);
  *out = gpu;
  return ncclSuccess;
}

void sayNoSenderSlots(void* base) { __atomic_store_n(&ipcShareOf(base)->slotsShared, kSlotsFailed, __ATOMIC_RELEASE); }

ncclResult_t mapReceiverSlots(void* base, const FifoLayout& layout, const GpuFifoMemory& memory, int rank, int device,
                              int peerRank, int peerAliveFd, uint64_t peerProcessId,
                              const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag,
                              GpuBuffers* out) {
  IpcShare* share = ipcShareOf(base);
  const double limit = static_cast<double>(bootstrapTimeoutSeconds());
  uint32_t how = kSlotsPending;
  // The sender shares them as it attaches, in the same set-up: a short wait.
  const SetUpWaitEnd waited = awaitSetUp(
      [&] {
        how = __atomic_load_n(&share->slotsShared, __ATOMIC_ACQUIRE);
        if (how != kSlotsPending) return SetUpPoll::kDone;
        if (peerAliveFd >= 0 && !peerAlive(peerAliveFd, peerProcessId)) {
          WARN("SHM: rank %d's process died before it shared its Simple slots (P2P read) with rank %d", peerRank, rank);
          return SetUpPoll::kFailed;
        }
        return SetUpPoll::kWaiting;
      },
      abortFlag, revokeFlag, limit);
  switch (waited) {
    case SetUpWaitEnd::kDone:
      break;
    case SetUpWaitEnd::kFailed:
      return ncclRemoteError;
    case SetUpWaitEnd::kAborted:
      return ncclSystemError;
    case SetUpWaitEnd::kRevoked:
      WARN("SHM: the communicator was revoked while rank %d waited for rank %d's Simple slots (P2P read)", rank,
           peerRank);
      return ncclSystemError;
    case SetUpWaitEnd::kTimedOut:
      WARN(
          "SHM: rank %d did not share its Simple slots (P2P read) with rank %d within %.0f s "
          "(CHORUS_BOOTSTRAP_TIMEOUT)",
          peerRank, rank, limit);
      return ncclRemoteError;
  }
  if (how != kSlotsByFd && how != kSlotsByHandle) {
    WARN("SHM: rank %d could not share its Simple slots (P2P read) with rank %d (its WARN says why)", peerRank, rank);
    return ncclRemoteError;
  }
  ncclResult_t fetched;
  std::string why;
  void* mapped =
      importShared(memory, device, how == kSlotsByFd, share->slotsTicket, share->slotsBytes, layout.simpleSlotsBytes(),
                   share->slotsHandle, peerRank, &share->slotsImported, &fetched, &why);
  if (fetched != ncclSuccess) return fetched;
  if (mapped == nullptr) {
    WARN(
        "SHM: rank %d (CUDA device %d) cannot map rank %d's Simple slots in GPU memory through CUDA IPC (P2P read): "
        "%s (NCCL_P2P_READ_ENABLE=0 keeps them on the receiver's GPU)",
        rank, device, peerRank, why.c_str());
    return ncclUnhandledCudaError;
  }
  *out = GpuBuffers{&memory, device, mapped, true, how == kSlotsByFd};
  out->slots = true;
  return ncclSuccess;
}

void letGoOfSegment(void* base, size_t bytes, const GpuBuffers& buffers, const GpuBuffers& slots, int peerAliveFd,
                    uint64_t peerProcessId) {
  std::lock_guard<std::mutex> lock(pendingMutex());
  std::vector<PendingRelease>& pending = pendingReleases();
  PendingRelease r{base, bytes, {buffers, slots}, peerAliveFd, peerProcessId};
  if (!tryRelease(r)) pending.push_back(r);
  std::erase_if(pending, [](PendingRelease& p) { return tryRelease(p); });
}

}  // namespace chorus
