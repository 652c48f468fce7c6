// What the bootstrap puts in the unique id and on the wire. Ranks of one communicator
// run the same build, so the structs travel as raw bytes of fixed size.
#pragma once

#include <sys/socket.h>

#include <cstdint>

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

// Rank -> root, once per rank of the root's block; and, when there are several roots, from
// the first rank of each block to the previous block's root, as the successor of that
// block's last rank (`successorOnly`, answered by nothing).
struct RootHello {
  uint64_t secret;
  int32_t rank;
  int32_t nranks;
  RootBlock block;  // the block of the root this hello goes to
  int32_t successorOnly;
  sockaddr_storage listenAddress;  // where the rank accepts ring and p2p connections
};

// Root -> rank, once all ranks reported: where rank (r+1)%n listens.
struct RootReply {
  sockaddr_storage successorAddress;
};

enum WireKind : int32_t {
  kWireRingHello = 1,   // first header of a ring connection (from the predecessor)
  kWireP2pHello = 2,    // first header of a point-to-point connection
  kWireP2pMessage = 3,  // a tagged message; `size` payload bytes follow
};

// Opens every rank-to-rank connection and precedes every tagged message.
struct WireHeader {
  uint64_t secret;
  int32_t rank;  // the sender
  int32_t kind;  // WireKind
  int32_t tag;
  uint32_t reserved;
  uint64_t size;
};

// A message larger than this is taken as corruption, not data.
constexpr uint64_t kMaxWireMessageBytes = uint64_t(1) << 32;
// Seconds an accepted connection may take to present its first header before it is dropped.
constexpr int kHelloTimeoutSeconds = 5;

// CHORUS_BOOTSTRAP_TIMEOUT in seconds (default 300), read anew on every call.
int bootstrapTimeoutSeconds();

}  // namespace chorus
