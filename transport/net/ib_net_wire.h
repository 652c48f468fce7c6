// What the IB net puts on its out-of-band TCP connection, in host byte order (all ranks
// of a job share an architecture): the listen handle, then each side's queue pair
// description, then one ready byte from the sender. Free of verbs types so that tests
// can build and check these messages everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/net/ib_port_attrs.h"
#include "transport/net/net.h"

namespace chorus::ib_net_wire {

inline constexpr uint64_t kHandleMagic = 0x43484f5255534942ull;  // "CHORUSIB"
inline constexpr uint64_t kQpInfoMagic = 0x43484f5255535150ull;  // "CHORUSQP"
inline constexpr uint8_t kReadyByte = 0x5a;

// ibv_port_attr::link_layer values (IBV_LINK_LAYER_*).
inline constexpr uint8_t kLinkLayerInfiniband = 1;
inline constexpr uint8_t kLinkLayerEthernet = 2;

// The listen handle: the listener's TCP address. `connectId` is the sender's own progress
// (0 on the wire): connect() keeps the id of its pending connection there between calls.
struct Handle {
  uint64_t magic;
  uint32_t addressLength;
  uint8_t address[28];  // a sockaddr_in or sockaddr_in6
  uint64_t connectId;
};
static_assert(sizeof(Handle) <= kNetHandleSize);

// One side's queue pair, for the other side's INIT -> RTR transition.
struct QpInfo {
  uint64_t magic;
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;  // enum ibv_mtu: the port's active MTU
  GidBytes gid;
};

inline const char* linkLayerName(uint8_t linkLayer) {
  return linkLayer == kLinkLayerInfiniband ? "InfiniBand" : linkLayer == kLinkLayerEthernet ? "RoCE" : "unknown";
}

// Checks the peer's QpInfo against this side; fills `*pathMtu` (enum ibv_mtu) on success,
// otherwise `*problem` says what is wrong (for the caller's WARN).
inline bool checkPeerQpInfo(const QpInfo& peer, uint8_t myLinkLayer, int myMtu, int* pathMtu, std::string* problem) {
  if (peer.magic != kQpInfoMagic) {
    *problem = "not an IB net peer (bad magic)";
    return false;
  }
  if (peer.linkLayer != myLinkLayer) {
    *problem =
        std::string("the peer's port is ") + linkLayerName(peer.linkLayer) + ", this one " + linkLayerName(myLinkLayer);
    return false;
  }
  if (peer.qpn == 0 || peer.qpn > 0xffffff || peer.psn > 0xffffff) {
    *problem =
        "queue pair number " + std::to_string(peer.qpn) + " or PSN " + std::to_string(peer.psn) + " out of range";
    return false;
  }
  if (myLinkLayer == kLinkLayerInfiniband && peer.lid == 0) {
    *problem = "the peer's InfiniBand port has no LID";
    return false;
  }
  *pathMtu = minIbMtu(peer.mtu, myMtu);
  if (*pathMtu == 0) {
    *problem = "active MTU " + std::to_string(peer.mtu) + " is not an ibv_mtu value";
    return false;
  }
  return true;
}

}  // namespace chorus::ib_net_wire
