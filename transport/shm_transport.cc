// SHM: ranks in different processes of one host share the receiver's FIFO through
// a POSIX shared memory object in /dev/shm. The receiver creates and sizes it (with
// posix_fallocate, so a full /dev/shm is an error now rather than SIGBUS later); the
// sender maps it and unlinks the name, so nothing is left behind in /dev/shm.
// Between GPU communicators whose GPUs can write each other's memory (as P2P decides,
// buffersOnReceiverGpu) only the control block is in /dev/shm: the buffers are the
// receiver's GPU memory, which the sender maps through CUDA IPC (shm_gpu_buffers.h),
// but under P2P read the Simple slots: the sender's, which the receiver maps.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/debug.h"
#include "core/file_descriptor.h"
#include "core/process_liveness.h"
#include "transport/shm_gpu_buffers.h"
#include "transport/transport.h"

namespace chorus {
namespace {

// The receiver's mapping names the segment (it made it); the sender's does not. Each side
// also holds its peer process's liveness handle (core/process_liveness.h), which the end's
// waits watch, and the GPU memory it allocated or mapped: the buffers, and under P2P read
// the Simple slots (the sender's from attach; the receiver's once awaitReady mapped them).
class ShmMapping : public ConnectionResource {
 public:
  ShmMapping(void* base, size_t bytes, std::string name, const FifoLayout& layout, int peerAlive,
             uint64_t peerProcessId, GpuBuffers gpu, GpuBuffers slots = GpuBuffers{})
      : base_(base),
        bytes_(bytes),
        name_(std::move(name)),
        layout_(layout),
        peerAlive_(peerAlive),
        peerProcessId_(peerProcessId),
        gpu_(gpu),
        slots_(slots) {}
  ~ShmMapping() override {
    if (!name_.empty()) shm_unlink(name_.c_str());  // ENOENT once the sender unlinked it: fine
    if (base_) {
      letGoOfSegment(base_, bytes_, gpu_, slots_, peerAlive_, peerProcessId_);
    } else {
      closePeerLiveness(peerAlive_);
    }
  }
  // Receiver under P2P read: the sender's Simple slots are still to be mapped (`rank`, its
  // GPU `device`, the sender `peerRank`).
  void expectSlotsFrom(int rank, int device, int peerRank) {
    slotsRank_ = rank;
    slots_.device = device;
    slotsPeer_ = peerRank;
  }
  ncclResult_t awaitReady(FifoEnd* end, const std::atomic<uint32_t>* abortFlag,
                          const std::atomic<uint32_t>* revokeFlag) override {
    if (slotsPeer_ < 0 || slots_.memory != nullptr) return ncclSuccess;
    GpuBuffers mapped;
    CHORUS_CHECK(mapReceiverSlots(base_, layout_, *gpu_.memory, slotsRank_, slots_.device, slotsPeer_, peerAlive_,
                                  peerProcessId_, abortFlag, revokeFlag, &mapped));
    slots_ = mapped;
    end->buffs[static_cast<int>(Protocol::Simple)] = static_cast<char*>(mapped.address);
    return ncclSuccess;
  }
  void* base() const { return base_; }

  // The sender releases the Simple buffer (the only one whose idleness shows) and its
  // backing store in /dev/shm, for both processes: only the sender writes the slots, so
  // while it is suspended and the receiver has read every step nobody touches them. (The
  // receiver may not: its sender, not suspended, may be writing its next call's steps.)
  // GPU memory is not given back (a GPU communicator's suspend is refused before this).
  size_t releaseIdleSlots() override {
    const bool sender = name_.empty();
    if (!sender || base_ == nullptr || gpu_.memory != nullptr || slots_.memory != nullptr ||
        !simpleSlotsIdle(static_cast<StepFifoControl*>(base_)))
      return 0;
    return releaseFifoPages(base_, layout_.bufferOffset(static_cast<int>(Protocol::Simple)), layout_.totalBytes(),
                            true);
  }

  // What this side allocated: the receiver its buffers (less the Simple slots under P2P
  // read), the sender those slots.
  size_t gpuBytes() const override {
    if (gpu_.memory != nullptr && !gpu_.imported) return layout_.receiverBuffersBytes(p2pRead());
    return slots_.memory != nullptr && !slots_.imported ? layout_.simpleSlotsBytes() : 0;
  }
  std::string describe() const override {
    if (gpu_.memory == nullptr) return "";
    return std::string("GPU memory of the receiver's GPU through CUDA IPC") +
           (p2pRead() ? ", Simple slots on the sender's GPU (P2P read)" : "");
  }

 private:
  // The Simple slots are the sender's: this side holds them, or (receiver) will map them.
  bool p2pRead() const { return slotsPeer_ >= 0 || slots_.memory != nullptr; }

  void* base_;
  size_t bytes_;
  std::string name_;
  FifoLayout layout_;
  int peerAlive_;
  uint64_t peerProcessId_;
  GpuBuffers gpu_;
  GpuBuffers slots_;
  int slotsRank_ = -1;
  int slotsPeer_ = -1;  // receiver under P2P read: the sender, whose slots it maps
};

// Points `end` at the FIFO and at the peer's process: its pid for messages and its
// liveness handle (-1 when it has none: it then only fails by timeout), opened here and
// owned by the connection's ShmMapping.
int fillEnd(void* base, void* gpuBuffers, const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
            FifoEnd* end) {
  *end = FifoEnd{};
  if (gpuBuffers != nullptr) {
    end->attachApart(static_cast<StepFifoControl*>(base), gpuBuffers, layout);
    end->gpuBuffers = true;
  } else {
    end->attach(base, layout);
  }
  end->peer = peer.rank;
  if (peer.processId == self.processId) return -1;
  end->peerPid = peer.pid;
  end->peerProcessId = peer.processId;
  end->peerAlive = openPeerLiveness(peer.processId);
  if (end->peerAlive < 0)
    INFO(kSubsysInit, "SHM: rank %d's process (pid %d) has no liveness file; its death is noticed by timeout only",
         peer.rank, peer.pid);
  return end->peerAlive;
}

class ShmTransport : public Transport {
 public:
  const char* name() const override { return "SHM"; }
  TransportId id() const override { return TransportId::Shm; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return self.hostHash == peer.hostHash && self.shmDevId == peer.shmDevId;
  }

  ncclResult_t createReceiver(const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, ConnectHandle* handle, FifoEnd* end,
                              std::unique_ptr<ConnectionResource>* resource) const override {
    const bool onGpu = buffersOnReceiverGpu(self, peer, link);
    // P2P read needs the sender to share its slots back, which a receiver can wait for only
    // where both ends are set up together.
    const bool slotsOnSender = onGpu && link.setUpTogether && simpleSlotsOnSenderGpu(self, peer, link);
    const size_t bytes = onGpu ? gpuFifoSegmentBytes() : layout.totalBytes();
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) nonce = reinterpret_cast<uintptr_t>(&nonce);
    char name[64];
    // Named by this process (core/process_liveness.h): if it dies before the sender has
    // mapped and unlinked it, the next Chorus process on this host removes it.
    snprintf(name, sizeof(name), "/chorus-%s-%d-%d-%016llx", processTag(self.processId).c_str(), peer.rank, self.rank,
             static_cast<unsigned long long>(nonce));
    FileDescriptor fd(shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600));
    if (fd.get() < 0) {
      WARN("SHM: shm_open(%s) for the connection from rank %d failed: %s", name, peer.rank, strerror(errno));
      return ncclSystemError;
    }
    int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
    if (err != 0) {
      shm_unlink(name);
      if (err == ENOSPC) {
        WARN(
            "SHM: /dev/shm is too small: the connection from rank %d needs %zu bytes there (posix_fallocate: %s); "
            "enlarge /dev/shm (e.g. docker --shm-size) or lower NCCL_BUFFSIZE",
            peer.rank, bytes, strerror(err));
      } else {
        WARN("SHM: posix_fallocate of %zu bytes on /dev/shm%s failed: %s", bytes, name, strerror(err));
      }
      return ncclSystemError;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) {
      shm_unlink(name);
      WARN("SHM: mmap of %zu bytes of /dev/shm%s failed: %s", bytes, name, strerror(errno));
      return ncclSystemError;
    }
    ConnectHandle shared;
    memset(static_cast<void*>(&shared), 0, sizeof(shared));  // padding too: the handle crosses the network
    GpuBuffers gpu;
    if (onGpu && shareReceiverBuffers(layout, slotsOnSender, self, peer, link, &shared, &gpu) != ncclSuccess) {
      munmap(base, bytes);
      shm_unlink(name);
      return ncclUnhandledCudaError;
    }
    const int peerAlive = fillEnd(base, gpu.address, layout, self, peer, end);
    auto mapping = std::make_unique<ShmMapping>(base, bytes, name, layout, peerAlive, peer.processId, gpu);
    if (slotsOnSender) {
      mapping->expectSlotsFrom(self.rank, self.cudaDev, peer.rank);
      end->buffs[static_cast<int>(Protocol::Simple)] = nullptr;  // until awaitReady has mapped them
    }
    memcpy(static_cast<void*>(handle), &shared, sizeof(shared));  // zeroed but for the GPU fields
    handle->slotsOnSender = slotsOnSender ? 1 : 0;
    handle->transport = TransportId::Shm;
    handle->bytes = bytes;
    handle->layout = layout;
    handle->ownerPid = self.pid;
    snprintf(handle->shmName, sizeof(handle->shmName), "%s", name);
    *resource = std::move(mapping);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo& self, const PeerInfo& peer,
                            const LinkContext& link, FifoEnd* end,
                            std::unique_ptr<ConnectionResource>* resource) const override {
    const size_t needed = handle.gpuBuffers != kBuffersInFifo ? gpuFifoSegmentBytes() : handle.layout.totalBytes();
    if (handle.bytes < needed) {
      WARN("SHM: rank %d announced a %llu-byte FIFO for a layout of %zu bytes", peer.rank,
           static_cast<unsigned long long>(handle.bytes), needed);
      return ncclInternalError;
    }
    char name[sizeof(handle.shmName) + 1];
    snprintf(name, sizeof(name), "%.*s", static_cast<int>(sizeof(handle.shmName)), handle.shmName);
    FileDescriptor fd(shm_open(name, O_RDWR, 0600));
    if (fd.get() < 0) {
      WARN("SHM: shm_open(%s) of rank %d's receive buffer failed: %s", name, peer.rank, strerror(errno));
      return ncclSystemError;
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < handle.bytes) {
      WARN("SHM: %s from rank %d is smaller than the %llu bytes announced", name, peer.rank,
           static_cast<unsigned long long>(handle.bytes));
      return ncclInternalError;
    }
    void* base = mmap(nullptr, handle.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) {
      WARN("SHM: mmap of %llu bytes of %s failed: %s", static_cast<unsigned long long>(handle.bytes), name,
           strerror(errno));
      return ncclSystemError;
    }
    shm_unlink(name);  // both sides have it mapped now
    GpuBuffers gpu, slots;
    ncclResult_t shared = ncclSuccess;
    if (handle.gpuBuffers != kBuffersInFifo) {
      shared = mapSenderBuffers(handle, base, self, peer, link, &gpu);
      if (shared == ncclSuccess && handle.slotsOnSender != 0) {
        shared = shareSenderSlots(handle.layout, base, self, peer, link, &slots);
      } else if (handle.slotsOnSender != 0) {
        sayNoSenderSlots(base);  // the receiver waits for them no longer
      }
    }
    const int peerAlive = shared == ncclSuccess ? fillEnd(base, gpu.address, handle.layout, self, peer, end) : -1;
    // From here the mapping lets go of all of it, on failure too.
    auto mapping = std::make_unique<ShmMapping>(base, handle.bytes, std::string(), handle.layout, peerAlive,
                                                peer.processId, gpu, slots);
    if (shared != ncclSuccess) return shared;
    if (slots.memory != nullptr) end->buffs[static_cast<int>(Protocol::Simple)] = static_cast<char*>(slots.address);
    *resource = std::move(mapping);
    return ncclSuccess;
  }
};

}  // namespace

const Transport& shmTransport() {
  static const ShmTransport transport;
  return transport;
}

}  // namespace chorus
