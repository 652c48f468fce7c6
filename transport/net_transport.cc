// NET: ranks on different hosts (or forced apart with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE
// or NCCL_HOSTID) each keep a local proxied FIFO, and the process's proxy thread moves
// its slots over the process's net (net/net_choice.h) with NetConnection.
#include <algorithm>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"
#include "transport/net/net_choice.h"
#include "transport/net/net_connection.h"
#include "transport/transport.h"

namespace chorus {
namespace {

static_assert(sizeof(ConnectHandle::netHandle) == kNetHandleSize, "ConnectHandle must hold a net handle");

// A GPU communicator's connections leave through the NIC nearest its GPU (LinkContext);
// the others are spread over the net's devices by peer rank.
int deviceFor(Net& net, int peerRank, const LinkContext& link) {
  int count = 1;
  if (net.devices(&count) != ncclSuccess || count < 1) count = 1;
  std::vector<std::string> names(static_cast<size_t>(count));
  if (link.nearNics != nullptr) {
    for (int d = 0; d < count; ++d) {
      NetProperties props;
      if (net.getProperties(d, &props) == ncclSuccess) names[static_cast<size_t>(d)] = props.name;
    }
  }
  return netDeviceFor(names, link.nearNics, peerRank);
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

// Slots of a NET connection. Measured on 2 cores over loopback (64 MiB AllReduce, 2
// ranks, 8 interleaved rounds): 2 slots of 512 KiB 1.70 GB/s busbw (median), 4 slots
// 1.43, NCCL's 8 1.20: a sender that runs far ahead of the kernel's copy out of the
// FIFO finds its slots evicted from the cache by then. CHORUS_NET_STEPS overrides.
int netSlots(const FifoLayout& layout) {
  static const int wanted = [] {
    const int64_t steps = envInt("CHORUS_NET_STEPS", 2);
    if (steps < 2 || steps > kMaxSteps || (steps & (steps - 1)) != 0) {
      WARN("CHORUS_NET_STEPS=%lld must be a power of two from 2 to %d; using 2", static_cast<long long>(steps),
           kMaxSteps);
      return 2;
    }
    return static_cast<int>(steps);
  }();
  return std::min(layout.nSlots, wanted);
}

void fillEnd(NetConnection& conn, const FifoLayout& layout, int peer, FifoEnd* end) {
  *end = FifoEnd{};
  end->attachProxied(conn.memory(), layout);
  end->peer = peer;
  end->peerPid = 0;  // possibly another host: the network says when it is gone
  end->drive = &NetConnection::drive;
  end->driveArg = &conn;
}

class NetTransport : public Transport {
 public:
  const char* name() const override { return processNetLabel(); }
  TransportId id() const override { return TransportId::Net; }

  bool canConnect(const PeerInfo& self, const PeerInfo&) const override { return netNamed(self.netName) != nullptr; }

  ncclResult_t createReceiver(const FifoLayout& memoryLayout, const PeerInfo& self, const PeerInfo& peer,
                              const LinkContext& link, ConnectHandle* handle, FifoEnd* end,
                              std::unique_ptr<ConnectionResource>* resource) const override {
    FifoLayout layout = memoryLayout;  // the sender takes it from the handle
    layout.nSlots = netSlots(memoryLayout);
    Net* net = netNamed(self.netName);
    if (net == nullptr) return ncclSystemError;
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(makeConnection(*net, layout, peer, false, &conn));
    memset(static_cast<void*>(handle), 0, sizeof(*handle));  // padding too: the handle crosses the network
    handle->transport = TransportId::Net;
    handle->layout = layout;
    CHORUS_CHECK(conn->listen(deviceFor(*net, peer.rank, link), handle->netHandle));
    fillEnd(*conn, layout, peer.rank, end);
    conn->start();
    *resource = std::move(conn);
    return ncclSuccess;
  }

  ncclResult_t attachSender(const ConnectHandle& handle, const PeerInfo& self, const PeerInfo& peer,
                            const LinkContext& link, FifoEnd* end,
                            std::unique_ptr<ConnectionResource>* resource) const override {
    Net* net = netNamed(self.netName);
    if (net == nullptr) return ncclSystemError;
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(makeConnection(*net, handle.layout, peer, true, &conn));
    NetCommConfig config;
    config.trafficClass = self.trafficClass;
    conn->setPeerHandle(deviceFor(*net, peer.rank, link), handle.netHandle, config);
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
