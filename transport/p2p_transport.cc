// P2P: both ranks live in one process, so the receiver's FIFO is plain heap memory
// and the sender writes into it directly; both ends own it (HeapBlock).
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/debug.h"
#include "transport/transport.h"

namespace chorus {
namespace {

// The receiver's FIFO memory, owned jointly by both ends: when one rank's communicator is
// aborted or destroyed while the other end still runs (a survivor of an ncclCommInitAll
// set), the memory stays with the survivor, whose waits then find it marked broken instead
// of touching freed memory. Senders find a block by its address in a process-wide table.
class HeapBlock {
 public:
  explicit HeapBlock(const FifoLayout& layout)
      : memory_(std::aligned_alloc(fifoPageBytes(), roundUpToFifoPages(layout.totalBytes()))), layout_(layout) {
    // Counters and LL/LL128 flags start at 0 (= no data yet); Simple slots need no clearing.
    if (memory_) memset(memory_, 0, layout.bufferOffset(static_cast<int>(Protocol::Simple)));
  }
  ~HeapBlock();
  HeapBlock(const HeapBlock&) = delete;
  HeapBlock& operator=(const HeapBlock&) = delete;
  void* memory() const { return memory_; }
  const FifoLayout& layout() const { return layout_; }

 private:
  void* memory_;
  FifoLayout layout_;
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
    auto it = blockTable().find(reinterpret_cast<uint64_t>(memory_));
    if (it != blockTable().end() && it->second.expired()) blockTable().erase(it);
  }
  std::free(memory_);
}

class HeapFifo : public ConnectionResource {
 public:
  HeapFifo(std::shared_ptr<HeapBlock> block, bool receiver) : block_(std::move(block)), receiver_(receiver) {}

  // The receiver releases the Simple buffer (the last, and the largest): the only one whose
  // idleness shows.
  size_t releaseIdleSlots() override {
    if (!receiver_ || !simpleSlotsIdle(static_cast<StepFifoControl*>(block_->memory()))) return 0;
    const FifoLayout& layout = block_->layout();
    return releaseFifoPages(block_->memory(), layout.bufferOffset(static_cast<int>(Protocol::Simple)),
                            layout.totalBytes(), false);
  }

  bool jointlyOwned() const override { return true; }

 private:
  std::shared_ptr<HeapBlock> block_;
  bool receiver_;
};

class P2pTransport : public Transport {
 public:
  const char* name() const override { return "P2P"; }
  TransportId id() const override { return TransportId::P2p; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return self.processId == peer.processId;
  }

  ncclResult_t createReceiver(const FifoLayout& layout, const PeerInfo&, const PeerInfo& peer, ConnectHandle* handle,
                              FifoEnd* end, std::unique_ptr<ConnectionResource>* resource) const override {
    const size_t bytes = layout.totalBytes();
    auto block = std::make_shared<HeapBlock>(layout);
    if (!block->memory()) {
      WARN("P2P: allocating %zu bytes for the connection from rank %d failed", bytes, peer.rank);
      return ncclSystemError;
    }
    {
      std::lock_guard<std::mutex> lock(blockTableMutex());
      blockTable()[reinterpret_cast<uint64_t>(block->memory())] = block;
    }
    memset(static_cast<void*>(handle), 0, sizeof(*handle));  // padding too: the handle crosses the network
    handle->transport = TransportId::P2p;
    handle->bytes = bytes;
    handle->layout = layout;
    handle->ownerPid = getpid();
    handle->address = reinterpret_cast<uint64_t>(block->memory());
    *end = FifoEnd{};
    end->attach(block->memory(), layout);
    end->peer = peer.rank;
    *resource = std::make_unique<HeapFifo>(std::move(block), true);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo&, const PeerInfo& peer, FifoEnd* end,
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
    *end = FifoEnd{};
    end->attach(block->memory(), handle.layout);
    end->peer = peer.rank;
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
