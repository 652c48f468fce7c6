// Bootstrap: the out-of-band TCP network that builds a communicator.
//
// ncclGetUniqueId starts a root listener (served by the process's one root thread) and
// writes its address and a random 64-bit secret into the 128-byte id. Each rank connects
// to the root, proves it holds the secret (a keyed hash of the root's challenge: the
// secret never travels, bootstrap_wire.h), and reports its own listening address; the
// root answers each rank with the address of its successor, and the ranks form a socket
// ring. An all-gather over that ring spreads every rank's address, after which any rank
// can send a tagged message to any other. Messages may arrive before they are awaited.
// Every connection a rank accepts is challenged the same way; one that does not prove the
// secret is dropped, and the communicator being built is not harmed.
//
// Settings: NCCL_COMM_ID (host:port of a root started by rank 0, secret derived from
// the string), NCCL_SOCKET_IFNAME (prefix list, ^ excludes, = exact),
// NCCL_SOCKET_FAMILY (AF_INET / AF_INET6).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "nccl.h"

namespace chorus {

// Where the root of a new id runs. kAsConfigured: as ncclGetUniqueId, at NCCL_COMM_ID
// when it is set (rank 0 starts it in Bootstrap::create); kFresh: a root of its own on
// this process, as a communicator made from another one (ncclCommSplit) needs.
enum class RootPlacement { kAsConfigured, kFresh };

// Starts a root (or, for NCCL_COMM_ID, leaves it to rank 0) and fills the id.
ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id, RootPlacement placement = RootPlacement::kAsConfigured);

class Bootstrap {
 public:
  // Joins the bootstrap network of `id` as `rank` of `nranks`. Blocks until the ring is
  // formed and every rank's address is known. Returns an error (never hangs) if the
  // root cannot be reached, `abortFlag` becomes non-zero, or the timeout
  // (CHORUS_BOOTSTRAP_TIMEOUT seconds, default 300) passes.
  static ncclResult_t create(const ncclUniqueId& id, int rank, int nranks, const std::atomic<uint32_t>* abortFlag,
                             std::unique_ptr<Bootstrap>* out);
  // The same over several ids (ncclCommInitRankScalable): every rank holds all of them,
  // and each root serves a block of the ranks (RootBlock); ids beyond nranks go unused.
  static ncclResult_t create(std::span<const ncclUniqueId> ids, int rank, int nranks,
                             const std::atomic<uint32_t>* abortFlag, std::unique_ptr<Bootstrap>* out);
  virtual ~Bootstrap() = default;

  // `data` holds nranks slots of `bytesPerRank`; slot `rank` is ours, the others are filled.
  virtual ncclResult_t allGather(void* data, size_t bytesPerRank) = 0;
  // Tagged point-to-point messages between any two ranks (size must match on both sides).
  virtual ncclResult_t send(int peer, int tag, const void* data, size_t size) = 0;
  virtual ncclResult_t recv(int peer, int tag, void* data, size_t size) = 0;
  // The same for a message that waits on the peer's call rather than on set-up (the handle
  // of the connection a first Recv makes): up to `timeoutSec` (CHORUS_TIMEOUT; 0: no limit),
  // `what` naming it in the WARN of a timeout. A timeout returns ncclRemoteError, as a call's
  // own does, and sets `*timedOut` (a peer that left returns the same code without it).
  virtual ncclResult_t recvForCall(int peer, int tag, void* data, size_t size, double timeoutSec,
                                   const std::string& what, bool* timedOut) = 0;
  virtual ncclResult_t barrier() = 0;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // The communicator's ncclCommRevoke flag: a wait under way when it is set stops (one
  // started afterwards, for the shrink that follows a revoke, does not).
  void watchRevoke(const std::atomic<uint32_t>* revokeFlag) { revokeFlag_ = revokeFlag; }

 protected:
  Bootstrap(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  int rank_;
  int nranks_;
  const std::atomic<uint32_t>* revokeFlag_ = nullptr;
};

}  // namespace chorus
