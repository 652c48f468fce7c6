#include "src/bootstrap/bootstrap_root.h"

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "core/thread_name.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {
namespace {

// Far beyond any real job; a larger count in a report means a corrupt report.
constexpr int32_t kMaxRanks = 1 << 24;

// An accepted connection whose report has not fully arrived yet.
struct PendingReport {
  Socket socket;
  RootHello hello{};
  size_t received = 0;
  std::chrono::steady_clock::time_point acceptedAt;
};

class RootServer {
 public:
  RootServer(Socket listener, uint64_t secret, int timeoutSeconds)
      : listener_(std::move(listener)), secret_(secret), timeoutSeconds_(timeoutSeconds) {}
  ncclResult_t run();

 private:
  ncclResult_t acceptQueued();
  // Reads what `pending_[index]` has sent; returns false when the connection is done
  // with (dropped, or its complete report taken).
  bool readReport(PendingReport& report);
  void takeReport(PendingReport& report);
  void dropStale();
  void answerRanks();

  Socket listener_;
  uint64_t secret_;
  int timeoutSeconds_;
  std::string where_;
  int nranks_ = -1;  // learned from the first report that presents the secret
  RootBlock block_;  // the ranks this root serves (all of them unless there are several roots)
  int reported_ = 0;
  std::optional<SocketAddress> successor_;  // of the block's last rank, when another root serves it
  bool needsSuccessor() const { return block_.count < nranks_; }
  bool complete() const { return nranks_ >= 0 && reported_ == block_.count && (!needsSuccessor() || successor_); }
  std::vector<Socket> rankSockets_;
  std::vector<SocketAddress> rankAddresses_;
  std::vector<PendingReport> pending_;
};

ncclResult_t RootServer::run() {
  where_ = listener_.address().toString();
  INFO(kSubsysBootstrap, "Bootstrap root: listening on %s", where_.c_str());
  Deadline deadline(timeoutSeconds_, nullptr);
  std::vector<pollfd> fds;
  while (!complete()) {
    if (deadline.expired()) {
      if (nranks_ < 0) {  // an id nobody used (one of several ncclCommInitRankScalable ids, say): no news
        INFO(kSubsysBootstrap, "Bootstrap root %s: no rank came in %d s; exiting", where_.c_str(), timeoutSeconds_);
        return ncclSuccess;
      }
      WARN("Bootstrap root %s: timed out after %d s with %d of %d ranks (%d to %d) reported%s", where_.c_str(),
           timeoutSeconds_, reported_, block_.count, block_.first, block_.first + block_.count - 1,
           needsSuccessor() && !successor_ ? " and no word from the next block's first rank" : "");
      return ncclSystemError;
    }
    // Every pending connection is polled, so a silent one cannot hold up the others.
    fds.assign(1, pollfd{listener_.fd(), POLLIN, 0});
    for (const PendingReport& report : pending_) fds.push_back({report.socket.fd(), POLLIN, 0});
    int n = poll(fds.data(), fds.size(), deadline.pollSliceMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      WARN("Bootstrap root %s: poll failed: %s", where_.c_str(), strerror(errno));
      return ncclSystemError;
    }
    for (size_t i = pending_.size(); i-- > 0;) {
      if (fds[i + 1].revents != 0 && !readReport(pending_[i])) pending_.erase(pending_.begin() + i);
    }
    dropStale();
    if (fds[0].revents != 0) CHORUS_CHECK(acceptQueued());
  }
  answerRanks();
  INFO(kSubsysBootstrap, "Bootstrap root %s: all %d ranks answered, exiting", where_.c_str(), block_.count);
  return ncclSuccess;
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
      if (!shed) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the backlog keeps it readable
      return ncclSuccess;
    }
    if (!socket.valid()) return ncclSuccess;
    pending_.push_back({std::move(socket), RootHello{}, 0, std::chrono::steady_clock::now()});
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
  // Judge the secret as soon as it is in, so an intruder is not kept around.
  if (report.received >= sizeof(uint64_t) && report.hello.secret != secret_) {
    INFO(kSubsysBootstrap, "Bootstrap root %s: dropped a connection from %s: wrong secret", where_.c_str(),
         peer.c_str());
    return false;
  }
  if (report.received == sizeof(RootHello)) {
    takeReport(report);
    return false;
  }
  if (closed) {
    WARN("Bootstrap root %s: connection from %s closed after %zu of %zu bytes of its report; dropped", where_.c_str(),
         peer.c_str(), report.received, sizeof(RootHello));
    return false;
  }
  return true;
}

void RootServer::takeReport(PendingReport& report) {
  const std::string peer = report.socket.address().toString();
  const RootHello& hello = report.hello;
  if (hello.nranks < 1 || hello.nranks > kMaxRanks) {
    WARN("Bootstrap root %s: report from %s has nranks %d; dropped", where_.c_str(), peer.c_str(), hello.nranks);
    return;
  }
  if (nranks_ >= 0 && hello.nranks != nranks_) {
    WARN("Bootstrap root %s: report from %s (rank %d) has nranks %d but earlier ranks said %d; dropped", where_.c_str(),
         peer.c_str(), hello.rank, hello.nranks, nranks_);
    return;
  }
  const RootBlock block = hello.block;
  if (block.count < 1 || block.first < 0 || block.first > hello.nranks - block.count) {
    WARN("Bootstrap root %s: report from %s has the block of %d ranks from %d, not within %d ranks; dropped",
         where_.c_str(), peer.c_str(), block.count, block.first, hello.nranks);
    return;
  }
  if (nranks_ >= 0 && (block.first != block_.first || block.count != block_.count)) {
    WARN(
        "Bootstrap root %s: report from %s (rank %d) has the block of %d ranks from %d, earlier ranks %d from %d; "
        "dropped",
        where_.c_str(), peer.c_str(), hello.rank, block.count, block.first, block_.count, block_.first);
    return;
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
    rankAddresses_.resize(block_.count);
  }
  if (successorOnly) {
    if (successor_) {
      WARN("Bootstrap root %s: the successor rank %d reported twice (again from %s); dropped", where_.c_str(),
           hello.rank, peer.c_str());
    } else {
      successor_ = address;
    }
    return;
  }
  const int slot = hello.rank - block_.first;
  if (rankSockets_[slot].valid()) {
    WARN("Bootstrap root %s: rank %d reported twice (again from %s); dropped the second connection", where_.c_str(),
         hello.rank, peer.c_str());
    return;
  }
  TRACE(kSubsysBootstrap, "Bootstrap root %s: rank %d of %d listens on %s", where_.c_str(), hello.rank, nranks_,
        address.toString().c_str());
  rankSockets_[slot] = std::move(report.socket);
  rankAddresses_[slot] = address;
  ++reported_;
}

void RootServer::dropStale() {
  auto now = std::chrono::steady_clock::now();
  for (size_t i = pending_.size(); i-- > 0;) {
    if (now - pending_[i].acceptedAt < std::chrono::seconds(kHelloTimeoutSeconds)) continue;
    WARN("Bootstrap root %s: connection from %s sent %zu of %zu bytes of its report in %d s; dropped", where_.c_str(),
         pending_[i].socket.address().toString().c_str(), pending_[i].received, sizeof(RootHello),
         kHelloTimeoutSeconds);
    pending_.erase(pending_.begin() + i);
  }
}

void RootServer::answerRanks() {
  for (int slot = 0; slot < block_.count; ++slot) {
    RootReply reply{};
    const bool last = slot + 1 == block_.count;
    reply.successorAddress = !last              ? rankAddresses_[slot + 1].storage
                             : needsSuccessor() ? successor_->storage
                                                : rankAddresses_[0].storage;
    Deadline deadline(timeoutSeconds_, nullptr);
    // A rank that gave up only costs itself; the rest are still answered.
    if (rankSockets_[slot].sendAll(&reply, sizeof(reply), deadline) != ncclSuccess) {
      WARN("Bootstrap root %s: could not answer rank %d", where_.c_str(), block_.first + slot);
    }
  }
}

}  // namespace

ncclResult_t runBootstrapRoot(Socket listener, uint64_t secret, int timeoutSeconds) {
  RootServer server(std::move(listener), secret, timeoutSeconds);
  return server.run();
}

ncclResult_t startBootstrapRoot(Socket listener, uint64_t secret) {
  const int timeoutSeconds = bootstrapTimeoutSeconds();
  try {
    std::thread([listener = std::move(listener), secret, timeoutSeconds]() mutable {
      nameThisThread("NCCL Root");
      (void)runBootstrapRoot(std::move(listener), secret, timeoutSeconds);
    }).detach();
  } catch (const std::system_error& e) {
    WARN("Bootstrap: cannot start the root thread: %s", e.what());
    return ncclSystemError;
  }
  return ncclSuccess;
}

}  // namespace chorus
