#include <string>

#include "core/debug.h"
#include "core/env.h"
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
