#include "src/bootstrap/bootstrap_root.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/debug.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

// Far beyond any real job; a larger count in a report means a corrupt report.
constexpr int32_t kMaxRanks = 1 << 24;

int msUntil(Clock::time_point when) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60 * 1000));
}

}  // namespace

RootServer::RootServer(Socket listener, uint64_t secret, int timeoutSeconds)
    : listener_(std::move(listener)),
      key_(bootstrapKey(secret)),
      timeoutSeconds_(timeoutSeconds),
      deadline_(Clock::now() + std::chrono::seconds(timeoutSeconds)),
      where_(listener_.address().toString()),
      drops_("Bootstrap root " + where_) {
  INFO(kSubsysBootstrap, "Bootstrap root: listening on %s", where_.c_str());
}

void RootServer::appendPollFds(std::vector<pollfd>* fds) const {
  fds->push_back({listener_.fd(), POLLIN, 0});
  for (const PendingReport& report : pending_) fds->push_back({report.socket.fd(), POLLIN, 0});
}

int RootServer::nextWakeMs() const {
  int ms = msUntil(deadline_);
  // Every pending connection is polled, so a silent one cannot hold up the others; it is
  // dropped once it overstays.
  for (const PendingReport& report : pending_) {
    ms = std::min(ms, msUntil(report.acceptedAt + std::chrono::seconds(kHelloTimeoutSeconds)));
  }
  return ms;
}

bool RootServer::serve(const pollfd* fds) {
  for (size_t i = pending_.size(); i-- > 0;) {
    if (fds[i + 1].revents != 0 && !readReport(pending_[i])) pending_.erase(pending_.begin() + i);
  }
  dropStale();
  if (fds[0].revents != 0) {
    const ncclResult_t accepted = acceptQueued();
    if (accepted != ncclSuccess) return finish(accepted);
  }
  if (refused() && reported_ == block_.count) return finish(ncclInvalidUsage);  // every rank was told
  if (complete()) {
    answerRanks();
    return finish(ncclSuccess);
  }
  if (Clock::now() >= deadline_) {
    return finish(nranks_ < 0 ? ncclSuccess : refused() ? ncclInvalidUsage : ncclSystemError);
  }
  return true;
}

bool RootServer::finish(ncclResult_t result) {
  result_ = result;
  if (refused()) {
    INFO(kSubsysBootstrap, "Bootstrap root %s: refused the communicator to %d of %d ranks, exiting", where_.c_str(),
         reported_, block_.count);
  } else if (result != ncclSuccess && nranks_ >= 0 && Clock::now() >= deadline_) {
    WARN("Bootstrap root %s: timed out after %d s with %d of %d ranks (%d to %d) reported%s", where_.c_str(),
         timeoutSeconds_, reported_, block_.count, block_.first, block_.first + block_.count - 1,
         needsSuccessor() && !successor_ ? " and no word from the next block's first rank" : "");
  } else if (complete()) {
    INFO(kSubsysBootstrap, "Bootstrap root %s: all %d ranks answered, exiting", where_.c_str(), block_.count);
  } else if (nranks_ < 0 && result == ncclSuccess) {
    // An id nobody used (one of several ncclCommInitRankScalable ids, say): no news.
    INFO(kSubsysBootstrap, "Bootstrap root %s: no rank came in %d s; exiting", where_.c_str(), timeoutSeconds_);
  }
  // Nothing more to serve: close now rather than when the owner gets round to it.
  pending_.clear();
  rankSockets_.clear();
  listener_.close();
  return false;
}

void RootServer::abandon() {
  drops_.discard();
  pending_.clear();
  rankSockets_.clear();
  listener_.close();
}

ncclResult_t RootServer::acceptQueued() {
  for (;;) {
    Socket socket;
    bool exhausted = false;
    CHORUS_CHECK(listener_.tryAccept(&socket, &exhausted));
    if (exhausted) {  // make room: the oldest connection that has not proved the secret goes
      const size_t shed = pending_.empty() ? 0 : 1;
      if (shed) pending_.erase(pending_.begin());
      warnOutOfDescriptors("the bootstrap root " + where_, shed);
      // The backlog keeps the listener readable: give descriptors a moment to come back.
      if (!shed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return ncclSuccess;
    }
    if (!socket.valid()) return ncclSuccess;
    PendingReport report;
    report.socket = std::move(socket);
    report.acceptedAt = Clock::now();
    std::string why;
    if (!sendChallenge(report.socket, &report.challenge, &why)) {
      drops_.dropped("from " + report.socket.address().toString() + ": " + why);
      continue;
    }
    pending_.push_back(std::move(report));
  }
}

bool RootServer::readReport(PendingReport& report) {
  const std::string peer = report.socket.address().toString();
  size_t received = 0;
  bool closed = false;
  char* bytes = reinterpret_cast<char*>(&report.hello);
  if (report.socket.tryRecv(bytes + report.received, sizeof(RootHello) - report.received, &received, &closed) !=
      ncclSuccess) {
    return false;  // tryRecv named the failure
  }
  report.received += received;
  if (report.received == sizeof(RootHello)) {
    if (report.hello.proof != rootHelloProof(key_, report.challenge, report.hello)) {
      drops_.dropped("from " + peer + ": its report does not prove the secret");
      return false;
    }
    takeReport(report);
    return false;
  }
  if (closed) {
    drops_.dropped("from " + peer + ": closed after " + std::to_string(report.received) + " of " +
                   std::to_string(sizeof(RootHello)) + " bytes of its report");
    return false;
  }
  return true;
}

// The report is proven: whatever is wrong with it now is a rank's mistake, worth a WARN. A
// report that cannot describe any communicator is dropped; one that disagrees with earlier
// reports ends the communicator for every rank (refuse).
void RootServer::takeReport(PendingReport& report) {
  const std::string peer = report.socket.address().toString();
  const RootHello& hello = report.hello;
  if (refused()) {
    tell(report.socket, hello.rank, refusalReply());
    const int slot = hello.rank - block_.first;
    if (!hello.successorOnly && slot >= 0 && slot < block_.count && !rankSockets_[slot].valid()) {
      rankSockets_[slot] = std::move(report.socket);  // counted, so the root ends once every rank was told
      ++reported_;
    }
    return;
  }
  if (hello.nranks < 1 || hello.nranks > kMaxRanks) {
    WARN("Bootstrap root %s: report from %s has nranks %d; dropped", where_.c_str(), peer.c_str(), hello.nranks);
    return;
  }
  if (nranks_ >= 0 && hello.nranks != nranks_) {
    return refuse(report, "rank " + std::to_string(hello.rank) + " (from " + peer + ") says the communicator has " +
                              std::to_string(hello.nranks) + " ranks, earlier ranks said " + std::to_string(nranks_));
  }
  const RootBlock block = hello.block;
  if (block.count < 1 || block.first < 0 || block.first > hello.nranks - block.count) {
    WARN("Bootstrap root %s: report from %s has the block of %d ranks from %d, not within %d ranks; dropped",
         where_.c_str(), peer.c_str(), block.count, block.first, hello.nranks);
    return;
  }
  if (nranks_ >= 0 && (block.first != block_.first || block.count != block_.count)) {
    return refuse(report, "rank " + std::to_string(hello.rank) + " (from " + peer + ") was given this root for " +
                              std::to_string(block.count) + " ranks from rank " + std::to_string(block.first) +
                              ", earlier ranks for " + std::to_string(block_.count) + " from rank " +
                              std::to_string(block_.first) + " (the ranks were given different lists of ids)");
  }
  const bool successorOnly = hello.successorOnly != 0;
  const int32_t lastPlusOne = block.first + block.count;
  const bool rankFits = successorOnly ? block.count < hello.nranks && hello.rank == lastPlusOne % hello.nranks
                                      : hello.rank >= block.first && hello.rank < lastPlusOne;
  if (!rankFits) {
    WARN("Bootstrap root %s: report from %s has rank %d, which is not %s; dropped", where_.c_str(), peer.c_str(),
         hello.rank, successorOnly ? "the first rank after this root's block" : "in this root's block");
    return;
  }
  SocketAddress address;
  if (!address.assign(reinterpret_cast<const sockaddr*>(&hello.listenAddress), sizeof(hello.listenAddress))) {
    WARN("Bootstrap root %s: report from %s (rank %d) has no IPv4/IPv6 address (family %d); dropped", where_.c_str(),
         peer.c_str(), hello.rank, hello.listenAddress.ss_family);
    return;
  }
  if (nranks_ < 0) {
    nranks_ = hello.nranks;
    block_ = block;
    rankSockets_.resize(block_.count);  // indexed by rank - block_.first
    rankCards_.resize(block_.count);
  }
  const PeerCard card{hello.listenAddress, {hello.listenNonce[0], hello.listenNonce[1]}};
  if (successorOnly) {
    if (successor_) {
      return refuse(report, "rank " + std::to_string(hello.rank) + ", the first rank after this root's ranks, " +
                                "reported twice (again from " + peer + "): two processes were given rank " +
                                std::to_string(hello.rank));
    }
    successor_ = card;
    return;
  }
  const int slot = hello.rank - block_.first;
  if (rankSockets_[slot].valid()) {
    return refuse(report, "rank " + std::to_string(hello.rank) + " reported twice (from " +
                              rankSockets_[slot].address().toString() + ", then " + peer +
                              "): two processes were given rank " + std::to_string(hello.rank) + " of " +
                              std::to_string(nranks_));
  }
  TRACE(kSubsysBootstrap, "Bootstrap root %s: rank %d of %d listens on %s", where_.c_str(), hello.rank, nranks_,
        address.toString().c_str());
  rankSockets_[slot] = std::move(report.socket);
  rankCards_[slot] = card;
  ++reported_;
}

void RootServer::dropStale() {
  const auto now = Clock::now();
  for (size_t i = pending_.size(); i-- > 0;) {
    if (now - pending_[i].acceptedAt < std::chrono::seconds(kHelloTimeoutSeconds)) continue;
    drops_.dropped("from " + pending_[i].socket.address().toString() + ": sent " +
                   std::to_string(pending_[i].received) + " of " + std::to_string(sizeof(RootHello)) +
                   " bytes of its report in " + std::to_string(kHelloTimeoutSeconds) + " s");
    pending_.erase(pending_.begin() + i);
  }
}

// Two proven reports disagree (ranks, root blocks, a rank twice): whichever is right, the
// communicator cannot be formed as every rank expects. So rather than leave the ranks that
// did agree waiting out the timeout, every rank that reported, and every one that reports
// until then, is told why at once (NCCL's root gives up too; its ranks see it close).
void RootServer::refuse(PendingReport& report, const std::string& reason) {
  WARN("Bootstrap root %s: %s; refusing the communicator to every rank", where_.c_str(), reason.c_str());
  refusal_ = reason;
  const RootReply reply = refusalReply();
  tell(report.socket, report.hello.rank, reply);
  for (int slot = 0; slot < block_.count; ++slot) {
    if (rankSockets_[slot].valid()) tell(rankSockets_[slot], block_.first + slot, reply);
  }
}

RootReply RootServer::refusalReply() const {
  RootReply reply{};
  reply.refused = 1;
  snprintf(reply.reason, sizeof(reply.reason), "%s", refusal_.c_str());
  return reply;
}

void RootServer::tell(Socket& socket, int rank, const RootReply& reply) {
  // Without waiting, as this thread serves other roots too: the rank sent its report and
  // waits for this answer, so the answer fits in the connection's empty send buffer. A rank
  // that gave up only costs itself; the rest are still answered.
  size_t sent = 0;
  if (socket.trySend(&reply, sizeof(reply), &sent) != ncclSuccess || sent != sizeof(reply)) {
    WARN("Bootstrap root %s: could not answer rank %d", where_.c_str(), rank);
  }
}

void RootServer::answerRanks() {
  for (int slot = 0; slot < block_.count; ++slot) {
    const bool last = slot + 1 == block_.count;
    const PeerCard& successor = !last ? rankCards_[slot + 1] : needsSuccessor() ? *successor_ : rankCards_[0];
    tell(rankSockets_[slot], block_.first + slot, successorReply(successor.address, successor.nonce));
  }
}

ncclResult_t runBootstrapRoot(Socket listener, uint64_t secret, int timeoutSeconds) {
  RootServer server(std::move(listener), secret, timeoutSeconds);
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    server.appendPollFds(&fds);
    if (poll(fds.data(), fds.size(), server.nextWakeMs()) < 0) {
      if (errno != EINTR) {
        WARN("Bootstrap root: poll failed: %s", strerror(errno));
        return ncclSystemError;
      }
      for (pollfd& fd : fds) fd.revents = 0;
    }
    if (!server.serve(fds.data())) return server.result();
  }
}

}  // namespace chorus
