// What the bootstrap puts in the unique id and on the wire. Ranks of one communicator
// run the same build, so the structs travel as raw bytes of fixed size.
//
// The unique id's secret never travels. The first message of every bootstrap connection
// carries a proof instead: SipHash-2-4, keyed by the secret, of a label naming the
// connection's role, a nonce the listener chose and what the message says.
//  - A root is always being served (by its process's root thread), so it challenges each
//    connection it accepts with a fresh nonce (Challenge) and the rank answers (RootHello).
//  - A rank serves its listener only while it is in a bootstrap call, and a send must not
//    wait for the peer to make one (one thread may drive several ranks: all send, then all
//    receive). So a rank's listener draws its nonce once and announces it with its address
//    (to the root, which tells the predecessor; in the all-gather, to everyone); a connecting
//    rank adds a fresh nonce of its own (PeerHello), and the listener accepts each
//    (rank, nonce) once. Either way a copied proof is worth nothing: not on another
//    connection to the same listener, not at another listener, not in another role.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "core/keyed_hash.h"
#include "core/socket.h"
#include "nccl.h"

namespace chorus {

// ncclUniqueId.internal: the secret, then the root's sockaddr_in / sockaddr_in6.
struct UniqueIdContents {
  uint64_t secret = 0;
  SocketAddress root;
  bool rootStartedByRank0 = false;  // NCCL_COMM_ID: Bootstrap::create on rank 0 starts the root
};
void packUniqueId(const UniqueIdContents& contents, ncclUniqueId* id);
// False when the id holds no IPv4/IPv6 root address.
bool unpackUniqueId(const ncclUniqueId& id, UniqueIdContents* contents);

// The ranks one root serves: all of them, or (ncclCommInitRankScalable with several ids)
// a block, spread as NCCL spreads them: the first nranks % nroots roots serve one more.
struct RootBlock {
  int32_t first = 0;
  int32_t count = 0;
};
int rootOfRank(int rank, int nranks, int nroots);
RootBlock blockOfRoot(int root, int nranks, int nroots);

inline constexpr uint64_t kChallengeMagic = 0x43484253434c4e47ull;  // "CHBSCLNG": root -> rank
inline constexpr uint64_t kRootHelloLabel = 0x4348425352484c4full;  // "CHBSRHLO": rank -> root
inline constexpr uint64_t kPeerHelloMagic = 0x43484253504c4f48ull;  // "CHBSPLOH": rank -> rank
inline constexpr uint64_t kKeyTweak = 0x4348425353495031ull;        // "CHBSSIP1": the key's second half
inline constexpr uint32_t kMessageMagic = 0x42534d47u;              // "BSMG"

// The SipHash key of an id: its 64-bit secret, and a constant for the second half.
inline SipKey bootstrapKey(uint64_t secret) { return SipKey{secret, kKeyTweak}; }

// Root -> rank: the first bytes on every connection a root accepts.
struct Challenge {
  uint64_t magic;  // kChallengeMagic
  uint64_t nonce[2];
};

// Rank -> root, once per rank of the root's block; and, when there are several roots, from
// the first rank of each block to the previous block's root, as the successor of that
// block's last rank (`successorOnly`, answered by nothing). Sent after the root's Challenge.
struct RootHello {
  int32_t rank;
  int32_t nranks;
  RootBlock block;  // the block of the root this hello goes to
  int32_t successorOnly;
  int32_t reserved;
  sockaddr_storage listenAddress;  // where the rank accepts ring and p2p connections
  uint64_t listenNonce[2];         // what its listener's PeerHellos must be proven with
  uint64_t proof;                  // rootHelloProof under the root's id's key
};

// Root -> rank, once all ranks reported: where rank (r+1)%n listens, and its nonce. Or,
// when `refused` is set, why there is no communicator: two proven reports disagreed about
// it (NUL-terminated text; the rank prints it, it does not parse it).
struct RootReply {
  sockaddr_storage successorAddress;
  uint64_t successorNonce[2];
  int32_t refused;
  char reason[236];
};
inline RootReply successorReply(const sockaddr_storage& address, const uint64_t nonce[2]) {
  RootReply reply{};
  reply.successorAddress = address;
  reply.successorNonce[0] = nonce[0];
  reply.successorNonce[1] = nonce[1];
  return reply;
}

// A rank's slot of the all-gather that ends Bootstrap::create: how to reach its listener.
struct PeerCard {
  sockaddr_storage address;
  uint64_t nonce[2];
};

enum WireKind : int32_t {
  kWireRingHello = 1,   // a ring connection (from the predecessor)
  kWireP2pHello = 2,    // a point-to-point connection
  kWireP2pMessage = 3,  // a tagged message; `size` payload bytes follow
};

// Rank -> rank: the first message of every rank-to-rank connection. Proven with the first
// id's key, the listener's announced nonce and `nonce`, fresh for the connection.
struct PeerHello {
  uint64_t magic;  // kPeerHelloMagic
  int32_t rank;    // the sender
  int32_t kind;    // kWireRingHello or kWireP2pHello
  uint64_t nonce;
  uint64_t proof;  // peerHelloProof
};

// Precedes every tagged message on a connection whose PeerHello was proven. `magic` only
// catches a stream out of step; the connection was authenticated once, by its hello.
struct WireHeader {
  uint32_t magic;  // kMessageMagic
  int32_t rank;    // the sender
  int32_t kind;    // kWireP2pMessage
  int32_t tag;
  uint64_t size;
};

inline uint64_t rootHelloProof(const SipKey& key, const Challenge& challenge, const RootHello& hello) {
  uint64_t words[8 + sizeof(sockaddr_storage) / 8];
  words[0] = kRootHelloLabel;
  words[1] = challenge.nonce[0];
  words[2] = challenge.nonce[1];
  words[3] = (uint64_t{static_cast<uint32_t>(hello.rank)} << 32) | static_cast<uint32_t>(hello.nranks);
  words[4] = (uint64_t{static_cast<uint32_t>(hello.block.first)} << 32) | static_cast<uint32_t>(hello.block.count);
  words[5] = (uint64_t{static_cast<uint32_t>(hello.successorOnly)} << 32) | static_cast<uint32_t>(hello.reserved);
  words[6] = hello.listenNonce[0];
  words[7] = hello.listenNonce[1];
  memcpy(words + 8, &hello.listenAddress, sizeof(hello.listenAddress));
  return sipHash24(key, words);
}

inline uint64_t peerHelloProof(const SipKey& key, const uint64_t listenNonce[2], const PeerHello& hello) {
  const uint64_t words[5] = {kPeerHelloMagic, listenNonce[0], listenNonce[1], hello.nonce,
                             (uint64_t{static_cast<uint32_t>(hello.rank)} << 32) | static_cast<uint32_t>(hello.kind)};
  return sipHash24(key, words);
}
// A hello to the listener that announced `listenNonce`, with the connection's own `nonce`.
inline PeerHello makePeerHello(const SipKey& key, const uint64_t listenNonce[2], uint64_t nonce, int32_t rank,
                               int32_t kind) {
  PeerHello hello{kPeerHelloMagic, rank, kind, nonce, 0};
  hello.proof = peerHelloProof(key, listenNonce, hello);
  return hello;
}

// A message larger than this is taken as corruption, not data.
constexpr uint64_t kMaxWireMessageBytes = uint64_t(1) << 32;
// Seconds an accepted connection may take to present its first message before it is dropped.
constexpr int kHelloTimeoutSeconds = 5;

}  // namespace chorus
