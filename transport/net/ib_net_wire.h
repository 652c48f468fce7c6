// What the IB net puts on its out-of-band TCP connection, in host byte order (all ranks
// of a job share an architecture): the listen handle, then each side's queue pair
// description, then one ready byte from the sender. Free of verbs types so that tests
// can build and check these messages everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/keyed_hash.h"
#include "transport/net/ib_port_attrs.h"
#include "transport/net/net.h"

namespace chorus::ib_net_wire {

inline constexpr uint64_t kHandleMagic = 0x43484f5255534942ull;  // "CHORUSIB"
inline constexpr uint64_t kQpInfoMagic = 0x43484f5255535150ull;  // "CHORUSQP"
inline constexpr uint8_t kReadyByte = 0x5a;

// ibv_port_attr::link_layer values (IBV_LINK_LAYER_*).
inline constexpr uint8_t kLinkLayerInfiniband = 1;
inline constexpr uint8_t kLinkLayerEthernet = 2;

// The listen handle, which only the ranks of the communicator get (over its bootstrap):
// the listener's TCP address and its random `key`, which each side's QpInfo proves it
// knows. `connectId` is the sender's own progress (0 on the wire): connect() keeps the id
// of its pending connection there between calls.
struct Handle {
  uint64_t magic;
  uint32_t addressLength;
  uint8_t address[28];  // a sockaddr_in or sockaddr_in6
  uint64_t connectId;
  uint64_t key[2];
};
static_assert(sizeof(Handle) <= kNetHandleSize);
inline SipKey keyOf(const Handle& handle) { return SipKey{handle.key[0], handle.key[1]}; }

// One side's queue pair, for the other side's INIT -> RTR transition. `proof`: a keyed
// hash of the rest, and of which side sent it, under the listener's key (qpInfoProof), so a
// process that connects to the listener without the handle gets no queue pair connected,
// and a QpInfo sent back to its author proves nothing.
struct QpInfo {
  uint64_t magic;
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;  // enum ibv_mtu: the port's active MTU
  GidBytes gid;
  uint64_t proof;
};

inline uint64_t qpInfoProof(const SipKey& key, const QpInfo& info, bool fromSender) {
  uint64_t gid[2];
  memcpy(gid, info.gid.data(), sizeof(gid));
  const uint64_t words[6] = {info.magic,
                             (uint64_t{info.qpn} << 32) | info.psn,
                             (uint64_t{info.lid} << 16) | (uint64_t{info.linkLayer} << 8) | info.mtu,
                             gid[0],
                             gid[1],
                             fromSender ? 1u : 2u};
  return sipHash24(key, words);
}
inline QpInfo provenQpInfo(const SipKey& key, QpInfo info, bool fromSender) {
  info.proof = qpInfoProof(key, info, fromSender);
  return info;
}

inline const char* linkLayerName(uint8_t linkLayer) {
  return linkLayer == kLinkLayerInfiniband ? "InfiniBand" : linkLayer == kLinkLayerEthernet ? "RoCE" : "unknown";
}

// Checks the peer's QpInfo against this side (`key`: the listener's; `peerIsSender`: which
// side the peer is); fills `*pathMtu` (enum ibv_mtu) on success, otherwise `*problem` says
// what is wrong (for the caller's WARN).
inline bool checkPeerQpInfo(const QpInfo& peer, const SipKey& key, bool peerIsSender, uint8_t myLinkLayer, int myMtu,
                            int* pathMtu, std::string* problem) {
  if (peer.magic != kQpInfoMagic) {
    *problem = "not an IB net peer (bad magic)";
    return false;
  }
  if (peer.proof != qpInfoProof(key, peer, peerIsSender)) {
    *problem = "its queue pair description does not prove the listen handle's key (not a rank of this communicator)";
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
