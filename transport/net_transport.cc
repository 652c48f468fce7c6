// NET: ranks on different hosts (or forced apart with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE
// or NCCL_HOSTID) each keep a local proxied FIFO, and the process's proxy thread moves
// its slots over the process's net (net/net_choice.h) with NetConnection.
#include <cstring>

#include "core/debug.h"
#include "net/net_choice.h"
#include "net/net_connection.h"
#include "transport.h"

namespace chorus {
namespace {

static_assert(sizeof(ConnectHandle::netHandle) == kNetHandleSize, "ConnectHandle must hold a net handle");

// Spreads connections over the net's devices by peer rank (a topology-aware choice of the
// nearest NIC belongs to the topology search).
int deviceFor(Net& net, int peerRank) {
  int count = 1;
  if (net.devices(&count) != ncclSuccess || count < 1) count = 1;
  return peerRank % count;
}

ncclResult_t makeConnection(Net& net, const FifoLayout& layout, const PeerInfo& peer, bool sending,
                            std::unique_ptr<NetConnection>* out) {
  auto conn = std::make_unique<NetConnection>(net, layout, peer.rank, sending);
  if (!conn->allocated()) {
    WARN("NET: allocating %zu bytes for the connection %s rank %d failed", FifoEnd::proxiedBytes(layout),
         sending ? "to" : "from", peer.rank);
    return ncclSystemError;
  }
  *out = std::move(conn);
  return ncclSuccess;
}

void fillEnd(NetConnection& conn, const FifoLayout& layout, int peer, FifoEnd* end) {
  *end = FifoEnd{};
  end->attachProxied(conn.memory(), layout);
  end->peer = peer;
  end->peerPid = 0;  // possibly another host: the network says when it is gone
}

class NetTransport : public Transport {
 public:
  const char* name() const override { return processNetLabel(); }
  TransportId id() const override { return TransportId::Net; }

  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return processNet() != nullptr; }

  ncclResult_t createReceiver(const FifoLayout& layout, const PeerInfo&, const PeerInfo& peer, ConnectHandle* handle,
                              FifoEnd* end, std::unique_ptr<ConnectionResource>* resource) const override {
    Net* net = processNet();
    if (net == nullptr) return ncclSystemError;
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(makeConnection(*net, layout, peer, false, &conn));
    *handle = ConnectHandle{};
    handle->transport = TransportId::Net;
    handle->layout = layout;
    CHORUS_CHECK(conn->listen(deviceFor(*net, peer.rank), handle->netHandle));
    fillEnd(*conn, layout, peer.rank, end);
    conn->start();
    *resource = std::move(conn);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo&, const PeerInfo& peer, FifoEnd* end,
                            std::unique_ptr<ConnectionResource>* resource) const override {
    Net* net = processNet();
    if (net == nullptr) return ncclSystemError;
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(makeConnection(*net, handle.layout, peer, true, &conn));
    conn->setPeerHandle(deviceFor(*net, peer.rank), handle.netHandle);
    fillEnd(*conn, handle.layout, peer.rank, end);
    conn->start();
    *resource = std::move(conn);
    return ncclSuccess;
  }
};

}  // namespace

const Transport& netTransport() {
  static const NetTransport transport;
  return transport;
}

}  // namespace chorus
