// P2P: both ranks live in one process, so the sender writes into the receiver's FIFO
// directly; both ends own it (HeapBlock). Between GPU communicators whose GPUs are close
// enough (NCCL_P2P_LEVEL) the buffers are the receiver's GPU memory, which the sender's
// kernels write over NVLink or PCIe (NCCL's P2P write), except the Simple slots under P2P
// read (simpleSlotsOnSenderGpu): those are the sender's GPU memory, which the receiver's
// kernels read; the control block stays in host memory, where the host can still mark the
// connection broken and read its stamps. Otherwise the whole FIFO is host memory.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/debug.h"
#include "core/env.h"
#include "transport/transport.h"

namespace chorus {
namespace {

// The receiver's FIFO memory, owned jointly by both ends: when one rank's communicator is
// aborted or destroyed while the other end still runs (a survivor of an ncclCommInitAll
// set), the memory stays with the survivor, whose waits then find it marked broken instead
// of touching freed memory. Senders find a block by its control block's address in a
// process-wide table.
class HeapBlock {
 public:
  // Host memory for the whole FIFO or, with `gpu`, for the control block alone and GPU
  // `device`'s memory for the buffers, but for the Simple slots on GPU `readFrom` (the
  // sender's, P2P read) where that is not -1. Null with `*why` when an allocation failed.
  static std::shared_ptr<HeapBlock> create(const FifoLayout& layout, const GpuFifoMemory* gpu, int device, int readFrom,
                                           std::string* why) {
    std::shared_ptr<HeapBlock> block(new HeapBlock(layout, gpu, device, gpu ? readFrom : -1));
    const size_t hostBytes = gpu ? sizeof(StepFifoControl) : layout.totalBytes();
    block->control_ = std::aligned_alloc(fifoPageBytes(), roundUpToFifoPages(hostBytes));
    if (block->control_ == nullptr) {
      *why = "allocating " + std::to_string(hostBytes) + " bytes of host memory failed";
      return nullptr;
    }
    // Counters and LL/LL128 flags start at 0 (= no data yet); Simple slots need no clearing.
    // GPU memory comes zeroed.
    memset(block->control_, 0, gpu ? hostBytes : layout.bufferOffset(static_cast<int>(Protocol::Simple)));
    if (gpu != nullptr) {
      block->gpuBuffers_ = gpu->allocate(device, block->receiverGpuBytes(), false, why);
      if (block->gpuBuffers_ == nullptr) return nullptr;
    }
    if (block->readFrom_ >= 0) {
      block->simpleSlots_ = gpu->allocate(block->readFrom_, block->senderGpuBytes(), false, why);
      if (block->simpleSlots_ == nullptr || !gpu->enablePeerAccess(device, block->readFrom_, why)) return nullptr;
    }
    return block;
  }
  ~HeapBlock();
  HeapBlock(const HeapBlock&) = delete;
  HeapBlock& operator=(const HeapBlock&) = delete;

  StepFifoControl* control() const { return static_cast<StepFifoControl*>(control_); }
  const FifoLayout& layout() const { return layout_; }
  bool onGpu() const { return gpu_ != nullptr; }
  int device() const { return device_; }
  // Points `end` at this FIFO.
  void attach(FifoEnd* end) const {
    if (onGpu()) {
      end->attachApart(control(), gpuBuffers_, layout_);
      end->gpuBuffers = true;
      if (simpleSlots_ != nullptr) end->buffs[static_cast<int>(Protocol::Simple)] = static_cast<char*>(simpleSlots_);
    } else {
      end->attach(control_, layout_);
    }
  }
  std::string describe() const {
    if (!onGpu()) return "host memory";
    const std::string on = "GPU memory of CUDA device " + std::to_string(device_);
    return readFrom_ < 0 ? on : on + ", Simple slots of CUDA device " + std::to_string(readFrom_) + " (P2P read)";
  }
  // GPU memory on the receiver's GPU: every buffer, or all but the Simple slots (the last).
  size_t receiverGpuBytes() const { return layout_.receiverBuffersBytes(readFrom_ >= 0); }
  // ... and on the sender's: the Simple slots under P2P read.
  size_t senderGpuBytes() const { return readFrom_ < 0 ? 0 : layout_.simpleSlotsBytes(); }

 private:
  HeapBlock(const FifoLayout& layout, const GpuFifoMemory* gpu, int device, int readFrom)
      : layout_(layout), gpu_(gpu), device_(device), readFrom_(readFrom) {}

  FifoLayout layout_;
  const GpuFifoMemory* gpu_;
  int device_;
  int readFrom_;  // the sender's GPU, holding the Simple slots (P2P read), or -1
  void* control_ = nullptr;
  void* gpuBuffers_ = nullptr;
  void* simpleSlots_ = nullptr;
};

std::mutex& blockTableMutex() {
  static std::mutex mutex;
  return mutex;
}
std::unordered_map<uint64_t, std::weak_ptr<HeapBlock>>& blockTable() {
  static std::unordered_map<uint64_t, std::weak_ptr<HeapBlock>> table;
  return table;
}

HeapBlock::~HeapBlock() {
  {
    std::lock_guard<std::mutex> lock(blockTableMutex());
    auto it = blockTable().find(reinterpret_cast<uint64_t>(control_));
    if (it != blockTable().end() && it->second.expired()) blockTable().erase(it);
  }
  // Both ends are gone, and their communicators' kernels ended before their connections.
  if (gpuBuffers_ != nullptr) gpu_->release(device_, gpuBuffers_);
  if (simpleSlots_ != nullptr) gpu_->release(readFrom_, simpleSlots_);
  std::free(control_);
}

class HeapFifo : public ConnectionResource {
 public:
  HeapFifo(std::shared_ptr<HeapBlock> block, bool receiver) : block_(std::move(block)), receiver_(receiver) {}

  // The sender releases the Simple buffer (the last, and the largest): the only one whose
  // idleness shows, and written by the sender alone, which is suspended (the receiver's
  // sender may not be, and may be writing its next call's steps).
  // GPU memory is not given back (a GPU communicator's suspend is refused before this).
  size_t releaseIdleSlots() override {
    if (receiver_ || block_->onGpu() || !simpleSlotsIdle(block_->control())) return 0;
    const FifoLayout& layout = block_->layout();
    return releaseFifoPages(block_->control(), layout.bufferOffset(static_cast<int>(Protocol::Simple)),
                            layout.totalBytes(), false);
  }

  bool jointlyOwned() const override { return true; }
  std::string describe() const override { return block_->describe(); }
  // Each end counts what is on its own GPU.
  size_t gpuBytes() const override {
    if (!block_->onGpu()) return 0;
    return receiver_ ? block_->receiverGpuBytes() : block_->senderGpuBytes();
  }

 private:
  std::shared_ptr<HeapBlock> block_;
  bool receiver_;
};

// FifoEnd::direct for a pair in this process, as CHORUS_P2P_IN_PLACE says: GPU
// communicators whose FIFO is in the receiver's GPU memory (the sender's GPU was given
// access to it, and so to ncclMemAlloc's memory there) by default; CPU communicators, which
// reach each other's host buffers, only when asked (slower on CPUs than the slots: a copy
// by one core instead of two pipelined ones). Symmetric, so both ends agree.
bool directBetween(const PeerInfo& a, const PeerInfo& b, const HeapBlock& block) {
  const int64_t mode = envInt("CHORUS_P2P_IN_PLACE", -1);
  if (mode == 0 || a.gpuComm != b.gpuComm) return false;
  return a.gpuComm != 0 ? block.onGpu() : mode == 1;
}

class P2pTransport : public Transport {
 public:
  const char* name() const override { return "P2P"; }
  TransportId id() const override { return TransportId::P2p; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return self.processId == peer.processId;
  }

  ncclResult_t createReceiver(const FifoLayout& layout, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, ConnectHandle* handle, FifoEnd* end,
                              std::unique_ptr<ConnectionResource>* resource) const override {
    const GpuFifoMemory* gpu = buffersOnReceiverGpu(self, peer, link) ? link.gpuMemory : nullptr;
    const int readFrom = gpu != nullptr && simpleSlotsOnSenderGpu(self, peer, link) ? peer.cudaDev : -1;
    std::string why;
    std::shared_ptr<HeapBlock> block = HeapBlock::create(layout, gpu, self.cudaDev, readFrom, &why);
    if (!block) {
      WARN("P2P: the FIFO for data from rank %d (%zu bytes in %s): %s", peer.rank, layout.totalBytes(),
           gpu ? ("GPU memory of CUDA device " + std::to_string(self.cudaDev)).c_str() : "host memory", why.c_str());
      return gpu ? ncclUnhandledCudaError : ncclSystemError;
    }
    {
      std::lock_guard<std::mutex> lock(blockTableMutex());
      blockTable()[reinterpret_cast<uint64_t>(block->control())] = block;
    }
    memset(static_cast<void*>(handle), 0, sizeof(*handle));  // padding too: the handle crosses the network
    handle->transport = TransportId::P2p;
    handle->bytes = layout.totalBytes();
    handle->layout = layout;
    handle->ownerPid = getpid();
    handle->address = reinterpret_cast<uint64_t>(block->control());
    handle->gpuBuffers = block->onGpu() ? kGpuBuffersInProcess : kBuffersInFifo;
    *end = FifoEnd{};
    block->attach(end);
    end->peer = peer.rank;
    end->direct = directBetween(self, peer, *block);
    *resource = std::make_unique<HeapFifo>(std::move(block), true);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo& self, const PeerInfo& peer,
                            const LinkContext& link, FifoEnd* end,
                            std::unique_ptr<ConnectionResource>* resource) const override {
    if (handle.ownerPid != getpid()) {
      WARN("P2P: connection handle from rank %d belongs to pid %d, not this process", peer.rank, handle.ownerPid);
      return ncclInternalError;
    }
    std::shared_ptr<HeapBlock> block;
    {
      std::lock_guard<std::mutex> lock(blockTableMutex());
      auto it = blockTable().find(handle.address);
      if (it != blockTable().end()) block = it->second.lock();
    }
    if (!block) {
      WARN("P2P: rank %d's receive FIFO is gone (its communicator was aborted or destroyed)", peer.rank);
      return ncclRemoteError;
    }
    if (block->onGpu()) {
      // This rank's kernels write into the receiver's GPU.
      std::string why;
      if (link.gpuMemory == nullptr) {
        WARN("P2P: rank %d's FIFO is GPU memory, but rank %d is not a GPU communicator", peer.rank, self.rank);
        return ncclInvalidUsage;
      }
      if (!link.gpuMemory->enablePeerAccess(self.cudaDev, block->device(), &why)) {
        WARN("P2P: rank %d (CUDA device %d) cannot write rank %d's FIFO on CUDA device %d: %s", self.rank, self.cudaDev,
             peer.rank, block->device(), why.c_str());
        return ncclUnhandledCudaError;
      }
    }
    *end = FifoEnd{};
    block->attach(end);
    end->peer = peer.rank;
    end->direct = directBetween(self, peer, *block);
    *resource = std::make_unique<HeapFifo>(std::move(block), false);
    return ncclSuccess;
  }
};

}  // namespace

const Transport& p2pTransport() {
  static const P2pTransport transport;
  return transport;
}

}  // namespace chorus
