// NET: ranks on different hosts (or forced apart with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE
// or NCCL_HOSTID) each keep a local proxied FIFO, and the process's proxy thread moves
// its slots over the process's net (net/net_choice.h) with NetConnection.
#include <algorithm>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"
#include "transport/net/net_choice.h"
#include "transport/net/net_connection.h"
#include "transport/net/note_link.h"
#include "transport/transport.h"

namespace chorus {
namespace {

static_assert(sizeof(ConnectHandle::netHandle) == kNetHandleSize, "ConnectHandle must hold a net handle");
static_assert(sizeof(ConnectHandle::noteLink) == sizeof(NoteLinkHandle), "ConnectHandle must hold a note link");

// Where one end of a connection leaves: the net's device and, for a GPU communicator, the
// path from its GPU to that device's NIC (a PathType; -1: unknown).
struct NetRoute {
  int dev = 0;
  int nicPath = -1;
};

// A GPU communicator's connections leave through the NIC nearest its GPU (LinkContext);
// the others are spread over the net's devices by peer rank.
NetRoute routeFor(Net& net, int peerRank, const LinkContext& link) {
  int count = 1;
  if (net.devices(&count) != ncclSuccess || count < 1) count = 1;
  std::vector<std::string> names(static_cast<size_t>(count));
  if (link.nearNics != nullptr) {
    for (int d = 0; d < count; ++d) {
      NetProperties props;
      if (net.getProperties(d, &props) == ncclSuccess) names[static_cast<size_t>(d)] = props.name;
    }
  }
  NetRoute route;
  int near = -1;
  route.dev = netDeviceFor(names, link.nearNics, peerRank, &near);
  if (near >= 0 && link.nearNicPaths != nullptr && near < static_cast<int>(link.nearNicPaths->size()))
    route.nicPath = (*link.nearNicPaths)[static_cast<size_t>(near)];
  return route;
}

// This end's slots: on its GPU where GPUDirect RDMA serves the connection (transport.h's
// netBuffersOnGpu), else host memory, with an INFO line saying why for a GPU communicator.
// A receiving end must also be able to flush the NIC's writes (NCCL_GDR_FLUSH_DISABLE=1:
// not needed).
NetGpuSlots gpuSlotsFor(Net& net, const NetRoute& route, const PeerInfo& self, const PeerInfo& peer,
                        const LinkContext& link, bool sending) {
  if (link.gpuMemory == nullptr) return {};
  NetProperties props;
  const int ptrSupport = net.getProperties(route.dev, &props) == ncclSuccess ? props.ptrSupport : kNetPtrHost;
  std::string why;
  NetGpuSlots slots{link.gpuMemory, self.cudaDev, (ptrSupport & kNetPtrDmaBuf) != 0,
                    envInt("NCCL_GDR_FLUSH_DISABLE", 0) == 0};
  bool gdr = netBuffersOnGpu(self, link, ptrSupport, route.nicPath, sending, &why);
  if (gdr && !sending && slots.flush && !slots.memory->flushRdmaWrites(slots.device, &why)) {
    why = "the NIC's writes cannot be flushed: " + why;
    gdr = false;
  }
  if (!gdr) {
    INFO(kSubsysNet | kSubsysInit, "NET: rank %d's slots for the connection %s rank %d are host memory: %s", self.rank,
         sending ? "to" : "from", peer.rank, why.c_str());
    return {};
  }
  return slots;
}

ncclResult_t makeConnection(Net& net, const FifoLayout& layout, const PeerInfo& peer, bool sending,
                            const NetGpuSlots& gpu, std::unique_ptr<NetConnection>* out) {
  std::string why;
  auto conn = std::make_unique<NetConnection>(net, layout, peer.rank, sending, gpu, &why);
  if (!conn->allocated()) {
    WARN("NET: allocating %zu bytes for the connection %s rank %d failed: %s", FifoEnd::proxiedBytes(layout),
         sending ? "to" : "from", peer.rank, why.c_str());
    return gpu.memory != nullptr ? ncclUnhandledCudaError : ncclSystemError;
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
  conn.attach(layout, end);
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
    const NetRoute route = routeFor(*net, peer.rank, link);
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(makeConnection(*net, layout, peer, false, gpuSlotsFor(*net, route, self, peer, link, false), &conn));
    memset(static_cast<void*>(handle), 0, sizeof(*handle));  // padding too: the handle crosses the network
    handle->transport = TransportId::Net;
    handle->layout = layout;
    NoteLinkHandle noteLink{};
    CHORUS_CHECK(conn->listen(route.dev, handle->netHandle, &noteLink));
    memcpy(handle->noteLink, &noteLink, sizeof(noteLink));
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
    const NetRoute route = routeFor(*net, peer.rank, link);
    std::unique_ptr<NetConnection> conn;
    CHORUS_CHECK(
        makeConnection(*net, handle.layout, peer, true, gpuSlotsFor(*net, route, self, peer, link, true), &conn));
    NetCommConfig config;
    config.trafficClass = self.trafficClass;
    NoteLinkHandle noteLink;
    memcpy(&noteLink, handle.noteLink, sizeof(noteLink));
    conn->setPeerHandle(route.dev, handle.netHandle, config, noteLink);
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
