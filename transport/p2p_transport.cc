// P2P: both ranks live in one process, so the receiver's FIFO is plain heap memory
// and the sender writes into it directly.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/debug.h"
#include "transport/transport.h"

namespace chorus {
namespace {

class HeapFifo : public ConnectionResource {
 public:
  explicit HeapFifo(const FifoLayout& layout)
      : memory_(std::aligned_alloc(fifoPageBytes(), roundUpToFifoPages(layout.totalBytes()))), layout_(layout) {
    // Counters and LL/LL128 flags start at 0 (= no data yet); Simple slots need no clearing.
    if (memory_) memset(memory_, 0, layout.bufferOffset(static_cast<int>(Protocol::Simple)));
  }
  ~HeapFifo() override { std::free(memory_); }
  void* memory() const { return memory_; }

  // The Simple buffer (the last, and the largest): the only one whose idleness shows.
  size_t releaseIdleSlots() override {
    if (!simpleSlotsIdle(static_cast<StepFifoControl*>(memory_))) return 0;
    return releaseFifoPages(memory_, layout_.bufferOffset(static_cast<int>(Protocol::Simple)), layout_.totalBytes(),
                            false);
  }

 private:
  void* memory_;
  FifoLayout layout_;
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
    auto heap = std::make_unique<HeapFifo>(layout);
    if (!heap->memory()) {
      WARN("P2P: allocating %zu bytes for the connection from rank %d failed", bytes, peer.rank);
      return ncclSystemError;
    }
    *handle = ConnectHandle{};
    handle->transport = TransportId::P2p;
    handle->bytes = bytes;
    handle->layout = layout;
    handle->ownerPid = getpid();
    handle->address = reinterpret_cast<uint64_t>(heap->memory());
    *end = FifoEnd{};
    end->attach(heap->memory(), layout);
    end->peer = peer.rank;
    *resource = std::move(heap);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo&, const PeerInfo& peer, FifoEnd* end,
                            std::unique_ptr<ConnectionResource>* resource) const override {
    if (handle.ownerPid != getpid()) {
      WARN("P2P: connection handle from rank %d belongs to pid %d, not this process", peer.rank, handle.ownerPid);
      return ncclInternalError;
    }
    *end = FifoEnd{};
    end->attach(reinterpret_cast<void*>(handle.address), handle.layout);
    end->peer = peer.rank;
    resource->reset();  // the receiver owns the memory
    return ncclSuccess;
  }
};

}  // namespace

const Transport& p2pTransport() {
  static const P2pTransport transport;
  return transport;
}

}  // namespace chorus
