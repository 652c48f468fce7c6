#include <algorithm>
#include <mutex>
#include <string>

#include "core/debug.h"
#include "core/env.h"
#include "core/path_type.h"
#include "transport/transport.h"

namespace chorus {

const Transport* selectTransport(const PeerInfo& self, const PeerInfo& peer) {
  const bool p2pDisabled = envInt("NCCL_P2P_DISABLE", 0) != 0;
  const bool shmDisabled = envInt("NCCL_SHM_DISABLE", 0) != 0;
  if (!p2pDisabled && p2pTransport().canConnect(self, peer)) return &p2pTransport();
  if (!shmDisabled && shmTransport().canConnect(self, peer)) return &shmTransport();
  if (netTransport().canConnect(self, peer)) return &netTransport();
  const std::string net = self.netName[0] != '\0'
                              ? std::string("the net config->netName \"") + self.netName + "\" asks for is not usable"
                              : std::string("no network is usable");
  WARN("Rank %d: no transport reaches peer rank %d on host %s (P2P %s, SHM %s, and %s: see the NET lines above)",
       self.rank, peer.rank, peer.hostname, p2pDisabled ? "disabled" : "needs the same process",
       shmDisabled ? "disabled" : "needs the same host and /dev/shm", net.c_str());
  return nullptr;
}

namespace {

// NCCL_P2P_LEVEL: the farthest path over which GPUs write each other's memory. Unset: PXB,
// NCCL's default on Intel and ARM hosts (GPUs under one PCI switch, or NVLink).
PathType p2pLevel() {
  const std::string text = envString("NCCL_P2P_LEVEL");
  PathType level = PathType::PXB;
  if (!text.empty() && !parsePathLevel(text, &level)) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      WARN("NCCL_P2P_LEVEL=%s is not a level (LOC, NVL, PIX, PXB, PHB, SYS or 0-4): using PXB", text.c_str());
    });
    level = PathType::PXB;
  }
  return level;
}

}  // namespace

bool buffersOnReceiverGpu(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link) {
  if (link.gpuMemory == nullptr) return false;
  if (envInt("NCCL_P2P_DISABLE", 0) != 0) return false;  // as NCCL's: no GPU writes another's memory
  const PathType level = p2pLevel();
  if (link.gpuPath < 0 || link.gpuPath > static_cast<int>(level)) {
    INFO(kSubsysP2p, "Rank %d -> rank %d through host memory: their GPUs' path is %s, NCCL_P2P_LEVEL is %s", peer.rank,
         self.rank, link.gpuPath < 0 ? "unknown" : pathTypeName(static_cast<PathType>(link.gpuPath)),
         pathTypeName(level));
    return false;
  }
  if (!link.peerWritesMine) {
    INFO(kSubsysP2p, "Rank %d -> rank %d through host memory: rank %d's GPU cannot write rank %d's GPU memory",
         peer.rank, self.rank, peer.rank, self.rank);
    return false;
  }
  return true;
}

int netDeviceFor(const std::vector<std::string>& deviceNames, const std::vector<std::string>* nearNics, int peerRank) {
  if (nearNics != nullptr) {
    for (const std::string& nic : *nearNics) {
      for (size_t d = 0; d < deviceNames.size(); ++d) {
        const std::string& name = deviceNames[d];
        if (name == nic ||
            (name.size() > nic.size() && name.compare(0, nic.size(), nic) == 0 && name[nic.size()] == ':'))
          return static_cast<int>(d);
      }
    }
  }
  const int count = std::max<int>(1, static_cast<int>(deviceNames.size()));
  return peerRank % count;
}

const Transport* transportById(TransportId id) {
  switch (id) {
    case TransportId::P2p:
      return &p2pTransport();
    case TransportId::Shm:
      return &shmTransport();
    case TransportId::Net:
      return &netTransport();
  }
  return nullptr;
}

}  // namespace chorus
