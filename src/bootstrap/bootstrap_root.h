// The bootstrap root: collects the listening address of every rank of its block (all
// ranks, unless ncclCommInitRankScalable spread them over several roots) and answers each
// with its successor's, then ends. The successor of the block's last rank is the next
// block's first rank, which reports to this root for that alone. Connections that do not
// prove they hold the id's secret (bootstrap_wire.h), or present a report that cannot
// describe a communicator, are dropped and the root keeps serving. Proven reports that
// disagree with each other (the ranks were told different things) end it for all: every
// rank is answered with the reason instead of its successor. A root no rank ever reached ends quietly at the
// timeout (an unused id).
//
// Roots started by ncclGetUniqueId share one thread per process (bootstrap_root_service.cc),
// which exists only while some root is open: each root is a RootServer it polls.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/socket.h"
#include "nccl.h"
#include "src/bootstrap/bootstrap_auth.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {

// Serves the root protocol on `listener` on the process's root thread, until all ranks
// are answered or CHORUS_BOOTSTRAP_TIMEOUT seconds (read here, on the calling thread) pass;
// then its sockets are closed.
ncclResult_t startBootstrapRoot(Socket listener, uint64_t secret);

// Serves the root protocol on the calling thread.
ncclResult_t runBootstrapRoot(Socket listener, uint64_t secret, int timeoutSeconds);

// One root's state, driven by whoever polls it: appendPollFds, poll, then serve with the
// same fds. Never blocks.
class RootServer {
 public:
  RootServer(Socket listener, uint64_t secret, int timeoutSeconds);

  // Adds the listener and every connection not yet reported.
  void appendPollFds(std::vector<pollfd>* fds) const;
  // Milliseconds until this root next has something to do without any fd being ready.
  int nextWakeMs() const;
  // Handles what poll reported for the fds appendPollFds added (in the same order) and the
  // clock. False once the root is finished: all ranks answered, timed out or failed
  // (result() says which), after which it holds only its sockets, to be destroyed.
  bool serve(const pollfd* fds);
  ncclResult_t result() const { return result_; }
  // Closes every socket without a log line: a forked child's copy of its parent's root.
  void abandon();

 private:
  // An accepted connection whose report has not fully arrived yet.
  struct PendingReport {
    Socket socket;
    Challenge challenge{};
    RootHello hello{};
    size_t received = 0;
    std::chrono::steady_clock::time_point acceptedAt;
  };

  ncclResult_t acceptQueued();
  // Reads what the connection has sent; false when it is done with (dropped, or its
  // complete report taken).
  bool readReport(PendingReport& report);
  void takeReport(PendingReport& report);
  void dropStale();
  void refuse(PendingReport& report, const std::string& reason);
  bool refused() const { return !refusal_.empty(); }
  RootReply refusalReply() const;
  void tell(Socket& socket, int rank, const RootReply& reply);
  void answerRanks();
  bool needsSuccessor() const { return block_.count < nranks_; }
  bool complete() const { return nranks_ >= 0 && reported_ == block_.count && (!needsSuccessor() || successor_); }
  // Ends the root: the INFO or WARN of how, and the result.
  bool finish(ncclResult_t result);

  Socket listener_;
  SipKey key_;
  int timeoutSeconds_;
  std::chrono::steady_clock::time_point deadline_;
  std::string where_;
  DropLog drops_;
  ncclResult_t result_ = ncclSuccess;
  int nranks_ = -1;  // learned from the first proven report
  RootBlock block_;  // the ranks this root serves (all of them unless there are several roots)
  int reported_ = 0;
  std::optional<PeerCard> successor_;  // of the block's last rank, when another root serves it
  std::vector<Socket> rankSockets_;
  std::vector<PeerCard> rankCards_;  // where each rank listens, and its listener's nonce
  std::vector<PendingReport> pending_;
  std::string refusal_;  // why the communicator was refused, once two reports disagreed
};

}  // namespace chorus
