#include <algorithm>
#include <mutex>
#include <string>

#include "core/debug.h"
#include "core/env.h"
#include "core/path_type.h"
#include "transport/net/net.h"
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

// A path level setting `name` set to `text`: the farthest path allowed; unset: PXB (a GPU and a peer under one
// PCI switch, or NVLink), NCCL's default on Intel and ARM hosts. `warned`: once per setting.
PathType pathLevel(const char* name, const std::string& text, std::once_flag* warned) {
  PathType level = PathType::PXB;
  if (!text.empty() && !parsePathLevel(text, &level)) {
    std::call_once(*warned, [&] {
      WARN("%s=%s is not a level (LOC, NVL, PIX, PXB, PHB, SYS or 0-4): using PXB", name, text.c_str());
    });
    level = PathType::PXB;
  }
  return level;
}

// NCCL_P2P_LEVEL: the farthest path over which GPUs write each other's memory.
PathType p2pLevel() {
  static std::once_flag warned;
  return pathLevel("NCCL_P2P_LEVEL", envString("NCCL_P2P_LEVEL"), &warned);
}

// NCCL_NET_GDR_LEVEL: the farthest path between a GPU and a NIC that reads or writes its memory.
PathType netGdrLevel() {
  static std::once_flag warned;
  return pathLevel("NCCL_NET_GDR_LEVEL", envString("NCCL_NET_GDR_LEVEL"), &warned);
}

}  // namespace

bool receiverGpuBuffersAllowed(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link, std::string* why) {
  why->clear();
  if (link.gpuMemory == nullptr || !peer.gpuComm || !self.gpuComm) return false;
  if (envInt("NCCL_P2P_DISABLE", 0) != 0) return false;  // as NCCL's: no GPU writes another's memory
  const PathType level = p2pLevel();
  if (link.gpuPath < 0 || link.gpuPath > static_cast<int>(level)) {
    *why = std::string("their GPUs' path is ") +
           (link.gpuPath < 0 ? "unknown" : pathTypeName(static_cast<PathType>(link.gpuPath))) + ", NCCL_P2P_LEVEL is " +
           pathTypeName(level);
    return false;
  }
  if (!link.peerWritesMine) {
    *why =
        "rank " + std::to_string(peer.rank) + "'s GPU cannot write rank " + std::to_string(self.rank) + "'s GPU memory";
    return false;
  }
  return true;
}

bool buffersOnReceiverGpu(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link) {
  std::string why;
  if (receiverGpuBuffersAllowed(self, peer, link, &why)) return true;
  if (!why.empty()) INFO(kSubsysP2p, "Rank %d -> rank %d through host memory: %s", peer.rank, self.rank, why.c_str());
  return false;
}

bool simpleSlotsOnSenderGpu(const PeerInfo& self, const PeerInfo& peer, const LinkContext& link) {
  if (!link.mineReadsPeer || link.gpuPath == static_cast<int>(PathType::LOC)) return false;
  const int64_t asked = envInt("NCCL_P2P_READ_ENABLE", -2);
  if (asked != -2) return asked != 0;
  return link.gpuPath == static_cast<int>(PathType::NVL) && self.gpuArch == 80 && peer.gpuArch == 80;
}

int netDeviceFor(const std::vector<std::string>& deviceNames, const std::vector<std::string>* nearNics, int peerRank,
                 int* nearIndex) {
  if (nearIndex != nullptr) *nearIndex = -1;
  if (nearNics != nullptr) {
    for (size_t n = 0; n < nearNics->size(); ++n) {
      const std::string& nic = (*nearNics)[n];
      for (size_t d = 0; d < deviceNames.size(); ++d) {
        const std::string& name = deviceNames[d];
        if (name == nic ||
            (name.size() > nic.size() && name.compare(0, nic.size(), nic) == 0 && name[nic.size()] == ':')) {
          if (nearIndex != nullptr) *nearIndex = static_cast<int>(n);
          return static_cast<int>(d);
        }
      }
    }
  }
  const int count = std::max<int>(1, static_cast<int>(deviceNames.size()));
  return peerRank % count;
}

bool netBuffersOnGpu(const PeerInfo& self, const LinkContext& link, int ptrSupport, int nicPath, bool sending,
                     std::string* why) {
  if (link.gpuMemory == nullptr || !self.gpuComm) {
    *why = "a CPU communicator";
    return false;
  }
  if ((ptrSupport & kNetPtrCuda) == 0) {
    *why = "the net cannot reach GPU memory (no nvidia-peermem or dma-buf support)";
    return false;
  }
  const PathType level = netGdrLevel();
  if (nicPath < 0 || nicPath > static_cast<int>(level)) {
    *why = std::string("the path from the GPU to the NIC is ") +
           (nicPath < 0 ? "unknown" : pathTypeName(static_cast<PathType>(nicPath))) + ", NCCL_NET_GDR_LEVEL is " +
           pathTypeName(level);
    return false;
  }
  if (sending && envInt("NCCL_NET_GDR_READ", self.ringOverNvlink ? 1 : 0) == 0) {
    *why = "NCCL_NET_GDR_READ is off (its default off a GPU without NVLink)";
    return false;
  }
  return true;
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
