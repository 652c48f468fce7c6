#include "src/bootstrap/bootstrap_ring.h"

#include <poll.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

// Why a rank's bootstrap stops answering while the communicator lives on elsewhere.
constexpr const char* kPeerGone = "it destroyed its communicator, or its process exited";

}  // namespace

RingBootstrap::RingBootstrap(int rank, int nranks, uint64_t secret, const std::atomic<uint32_t>* abortFlag,
                             Socket listener)
    : Bootstrap(rank, nranks),
      key_(bootstrapKey(secret)),
      abortFlag_(abortFlag),
      listener_(std::move(listener)),
      drops_("Bootstrap: rank " + std::to_string(rank) + "'s listener " + listener_.address().toString()),
      peerAddresses_(nranks),
      peerNonces_(nranks),
      outgoing_(nranks),
      peerClosed_(nranks, false) {}

ncclResult_t RingBootstrap::connect(const RootContact& root, const std::optional<RootContact>& previous) {
  Deadline deadline(bootstrapTimeoutSeconds(), abortFlag_, revokeFlag_);
  const std::string rootText = root.address.toString();
  INFO(kSubsysBootstrap, "Bootstrap: rank %d of %d listens on %s, root at %s (ranks %d to %d)", rank_, nranks_,
       listener_.address().toString().c_str(), rootText.c_str(), root.block.first,
       root.block.first + root.block.count - 1);
  // Drawn before any connection is accepted: every hello to this listener is proven with it.
  CHORUS_CHECK(randomBytes(listenNonce_, sizeof(listenNonce_), "the bootstrap listener's nonce"));
  RootHello hello{};
  hello.rank = rank_;
  hello.nranks = nranks_;
  hello.listenAddress = listener_.address().storage;
  hello.listenNonce[0] = listenNonce_[0];
  hello.listenNonce[1] = listenNonce_[1];

  // Several roots: the previous block's root learns that we follow its last rank. Sent
  // before waiting for our own root, which may be waiting for the same from the next block.
  if (previous) {
    RootHello successor = hello;
    successor.block = previous->block;
    successor.successorOnly = 1;
    bool explained = false;
    const ncclResult_t res = reportToRoot(*previous, successor, deadline, nullptr, &explained);
    if (res != ncclSuccess) {
      if (!explained) {
        WARN("Bootstrap: rank %d of %d could not reach the previous block's root at %s", rank_, nranks_,
             previous->address.toString().c_str());
      }
      return res;
    }
  }

  // Report to the root; its answer is where our successor listens.
  hello.block = root.block;
  RootAnswer answer;
  bool explained = false;
  ncclResult_t res = reportToRoot(root, hello, deadline, &answer, &explained);
  if (res != ncclSuccess) {
    if (!explained) {
      WARN("Bootstrap: rank %d of %d got no answer from the root at %s", rank_, nranks_, rootText.c_str());
    }
    return res;
  }
  peerAddresses_[rank_] = listener_.address();
  if (nranks_ == 1) return ncclSuccess;

  // Connect to the successor, then wait for the predecessor to connect to us. It listened
  // before it reported to the root.
  CHORUS_CHECK(
      connectToRank(successor(), answer.successor, deadline, &ringSend_, "its init failed, or its process exited"));
  const std::string toSuccessor = "the ring connection to rank " + std::to_string(successor());
  CHORUS_CHECK(introduce(ringSend_, kWireRingHello, answer.successorNonce, deadline, toSuccessor));
  const std::string what = "the ring connection from rank " + std::to_string(predecessor());
  while (!ringRecv_.valid()) CHORUS_CHECK(progress(deadline, what, nullptr, 0));

  std::vector<PeerCard> cards(nranks_);
  cards[rank_] = PeerCard{listener_.address().storage, {listenNonce_[0], listenNonce_[1]}};
  CHORUS_CHECK(allGather(cards.data(), sizeof(PeerCard)));
  for (int r = 0; r < nranks_; ++r) {
    if (!peerAddresses_[r].assign(reinterpret_cast<const sockaddr*>(&cards[r].address), sizeof(sockaddr_storage))) {
      WARN("Bootstrap: rank %d: the all-gather brought no usable address for rank %d", rank_, r);
      return ncclInternalError;
    }
    peerNonces_[r] = {cards[r].nonce[0], cards[r].nonce[1]};
  }
  INFO(kSubsysBootstrap, "Bootstrap: rank %d of %d connected", rank_, nranks_);
  return ncclSuccess;
}

ncclResult_t RingBootstrap::introduce(Socket& socket, int32_t kind, const uint64_t listenNonce[2],
                                      const Deadline& deadline, const std::string& what) {
  uint64_t nonce = 0;
  CHORUS_CHECK(randomBytes(&nonce, sizeof(nonce), "a bootstrap connection's nonce"));
  const PeerHello hello = makePeerHello(key_, listenNonce, nonce, rank_, kind);
  return sendProgressing(socket, &hello, sizeof(hello), deadline, what);
}

// ---- progress: accept, authenticate, read ----

ncclResult_t RingBootstrap::progress(const Deadline& deadline, const std::string& what, pollfd* extra,
                                     size_t extraCount) {
  CHORUS_CHECK(deadline.check(what));
  std::vector<pollfd> fds;
  fds.reserve(1 + pending_.size() + incoming_.size() + extraCount);
  fds.push_back({listener_.fd(), POLLIN, 0});
  for (const Connection& c : pending_) fds.push_back({c.socket.fd(), POLLIN, 0});
  for (const Connection& c : incoming_) fds.push_back({c.socket.fd(), POLLIN, 0});
  for (size_t i = 0; i < extraCount; ++i) fds.push_back({extra[i].fd, extra[i].events, 0});
  int n = poll(fds.data(), fds.size(), deadline.pollSliceMs());
  if (n < 0) {
    if (errno == EINTR) return ncclSuccess;
    WARN("Bootstrap: rank %d: poll failed while waiting for %s: %s", rank_, what.c_str(), strerror(errno));
    return ncclSystemError;
  }
  const size_t firstPending = 1;
  const size_t firstIncoming = firstPending + pending_.size();
  for (size_t i = 0; i < extraCount; ++i) extra[i].revents = fds[firstIncoming + incoming_.size() + i].revents;
  if (n == 0) {
    dropStalePending();
    return ncclSuccess;
  }
  // Incoming first: taking a pending hello appends to incoming_, which must not shift these indices.
  for (size_t i = incoming_.size(); i-- > 0;) {
    if (fds[firstIncoming + i].revents != 0 && readMessages(incoming_[i]) != Outcome::Keep) {
      incoming_.erase(incoming_.begin() + i);
    }
  }
  for (size_t i = pending_.size(); i-- > 0;) {
    if (fds[firstPending + i].revents != 0 && readHello(pending_[i]) != Outcome::Keep) {
      pending_.erase(pending_.begin() + i);
    }
  }
  dropStalePending();
  if (fds[0].revents != 0) CHORUS_CHECK(acceptQueued());
  return ncclSuccess;
}

ncclResult_t RingBootstrap::acceptQueued() {
  for (;;) {
    Socket socket;
    bool exhausted = false;
    CHORUS_CHECK(listener_.tryAccept(&socket, &exhausted));
    if (exhausted) {  // make room: the oldest connection that has not proved the secret goes
      const size_t shed = pending_.empty() ? 0 : 1;
      if (shed) pending_.erase(pending_.begin());
      warnOutOfDescriptors("the bootstrap listener " + listener_.address().toString(), shed);
      if (!shed) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the backlog keeps it readable
      return ncclSuccess;
    }
    if (!socket.valid()) return ncclSuccess;
    Connection connection;
    connection.socket = std::move(socket);
    connection.acceptedAt = std::chrono::steady_clock::now();
    pending_.push_back(std::move(connection));
  }
}

RingBootstrap::Outcome RingBootstrap::readHello(Connection& c) {
  const std::string from = c.socket.address().toString();
  size_t received = 0;
  bool closed = false;
  char* bytes = reinterpret_cast<char*>(&c.hello);
  if (c.socket.tryRecv(bytes + c.helloBytes, sizeof(PeerHello) - c.helloBytes, &received, &closed) != ncclSuccess) {
    return Outcome::Drop;
  }
  c.helloBytes += received;
  if (c.helloBytes < sizeof(PeerHello)) {
    if (!closed) return Outcome::Keep;
    drops_.dropped("from " + from + ": closed after " + std::to_string(c.helloBytes) + " of " +
                   std::to_string(sizeof(PeerHello)) + " hello bytes");
    return Outcome::Drop;
  }
  const PeerHello& h = c.hello;
  if (h.magic != kPeerHelloMagic || h.proof != peerHelloProof(key_, listenNonce_, h)) {
    drops_.dropped("from " + from + ": its hello does not prove the secret");
    return Outcome::Drop;
  }
  // A proven hello counts once: the same bytes again are a copy, not a rank.
  if (!helloSeen_.insert({h.rank, h.nonce}).second) {
    drops_.dropped("from " + from + ": a copy of a hello this listener already took");
    return Outcome::Drop;
  }
  // Proven: what is wrong from here on is a rank's mistake, worth a WARN.
  if (h.kind == kWireRingHello && h.rank == predecessor() && !ringRecv_.valid()) {
    ringRecv_ = std::move(c.socket);
    return Outcome::Taken;
  }
  if (h.kind == kWireP2pHello && h.rank >= 0 && h.rank < nranks_ && h.rank != rank_) {
    c.peer = h.rank;
    c.headerBytes = 0;
    peerClosed_[h.rank] = false;
    incoming_.push_back(std::move(c));
    return Outcome::Taken;
  }
  WARN("Bootstrap: rank %d: unexpected hello from %s (kind %d, rank %d of %d); dropped", rank_, from.c_str(), h.kind,
       h.rank, nranks_);
  return Outcome::Drop;
}

RingBootstrap::Outcome RingBootstrap::readMessages(Connection& c) {
  for (;;) {
    size_t received = 0;
    bool closed = false;
    if (c.headerBytes < sizeof(WireHeader)) {
      char* bytes = reinterpret_cast<char*>(&c.header);
      if (c.socket.tryRecv(bytes + c.headerBytes, sizeof(WireHeader) - c.headerBytes, &received, &closed) !=
          ncclSuccess) {
        peerClosed_[c.peer] = true;
        return Outcome::Drop;
      }
      c.headerBytes += received;
      if (c.headerBytes == sizeof(WireHeader)) {
        const WireHeader& h = c.header;
        if (h.magic != kMessageMagic || h.rank != c.peer || h.kind != kWireP2pMessage ||
            h.size > kMaxWireMessageBytes) {
          WARN(
              "Bootstrap: rank %d: corrupt message header from rank %d (kind %d, rank %d, size %llu); dropping the "
              "connection",
              rank_, c.peer, h.kind, h.rank, static_cast<unsigned long long>(h.size));
          peerClosed_[c.peer] = true;
          return Outcome::Drop;
        }
        c.payload.assign(h.size, 0);
        c.payloadBytes = 0;
      }
    }
    if (c.headerBytes == sizeof(WireHeader) && c.payloadBytes < c.payload.size() && !closed) {
      if (c.socket.tryRecv(c.payload.data() + c.payloadBytes, c.payload.size() - c.payloadBytes, &received, &closed) !=
          ncclSuccess) {
        peerClosed_[c.peer] = true;
        return Outcome::Drop;
      }
      c.payloadBytes += received;
    }
    if (c.headerBytes == sizeof(WireHeader) && c.payloadBytes == c.payload.size()) {
      unexpected_[{c.peer, c.header.tag}].push_back(std::move(c.payload));
      c.payload = {};
      c.headerBytes = 0;
      c.payloadBytes = 0;
      if (!closed) continue;
    }
    if (closed) {
      // The peer finished with us (a clean close lands between messages).
      if (c.headerBytes != 0) {
        WARN("Bootstrap: rank %d: rank %d closed its connection in the middle of a message", rank_, c.peer);
      }
      peerClosed_[c.peer] = true;
      return Outcome::Drop;
    }
    return Outcome::Keep;  // the kernel has nothing more for now
  }
}

void RingBootstrap::dropStalePending() {
  auto now = std::chrono::steady_clock::now();
  for (size_t i = pending_.size(); i-- > 0;) {
    if (now - pending_[i].acceptedAt < std::chrono::seconds(kHelloTimeoutSeconds)) continue;
    drops_.dropped("from " + pending_[i].socket.address().toString() + ": sent " +
                   std::to_string(pending_[i].helloBytes) + " of " + std::to_string(sizeof(PeerHello)) +
                   " hello bytes in " + std::to_string(kHelloTimeoutSeconds) + " s");
    pending_.erase(pending_.begin() + i);
  }
}

// ---- operations ----

ncclResult_t RingBootstrap::checkPeer(int peer, const char* call) const {
  if (peer < 0 || peer >= nranks_) {
    WARN("Bootstrap %s: peer %d is outside [0, %d)", call, peer, nranks_);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t RingBootstrap::sendProgressing(Socket& socket, const void* data, size_t size, const Deadline& deadline,
                                            const std::string& what) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    size_t sent = 0;
    CHORUS_CHECK(socket.trySend(bytes + done, size - done, &sent));
    done += sent;
    if (done == size) break;
    pollfd writable{socket.fd(), POLLOUT, 0};
    CHORUS_CHECK(progress(deadline, what, &writable, 1));
  }
  return ncclSuccess;
}

ncclResult_t RingBootstrap::connectToRank(int peer, const SocketAddress& at, const Deadline& deadline, Socket* out,
                                          const char* whyGone) {
  // Its listener was up before its address was known here: refusals mean it is gone.
  bool gone = false;
  const ncclResult_t connected = Socket::connect(at, deadline, out, &gone);
  if (gone) {
    WARN("Bootstrap: rank %d: rank %d no longer listens at %s (refused for %d s): %s", rank_, peer,
         at.toString().c_str(), Socket::kGoneAfterSeconds, whyGone);
  }
  return connected;
}

void RingBootstrap::warnConnectionClosed(int peer) const {
  WARN("Bootstrap: rank %d: the connection to rank %d at %s is closed: %s", rank_, peer,
       peerAddresses_[peer].toString().c_str(), kPeerGone);
}

ncclResult_t RingBootstrap::peerSocket(int peer, const Deadline& deadline, Socket** out) {
  Socket& socket = outgoing_[peer];
  // The peer never writes on a connection it accepted: anything to read there is its close.
  // Seen now, rather than after a message that would vanish into the closed connection.
  pollfd closed{socket.fd(), POLLIN | POLLRDHUP, 0};
  if (socket.valid() && poll(&closed, 1, 0) == 1) {
    warnConnectionClosed(peer);
    socket.close();
    return ncclRemoteError;
  }
  if (!socket.valid()) {
    Socket fresh;
    CHORUS_CHECK(connectToRank(peer, peerAddresses_[peer], deadline, &fresh, kPeerGone));
    CHORUS_CHECK(
        introduce(fresh, kWireP2pHello, peerNonces_[peer].data(), deadline,
                  "the connection to rank " + std::to_string(peer) + " at " + peerAddresses_[peer].toString()));
    socket = std::move(fresh);
  }
  *out = &socket;
  return ncclSuccess;
}

ncclResult_t RingBootstrap::send(int peer, int tag, const void* data, size_t size) {
  CHORUS_CHECK(checkPeer(peer, "send"));
  if (data == nullptr && size > 0) {
    WARN("Bootstrap send: data is null for %zu bytes to rank %d", size, peer);
    return ncclInvalidArgument;
  }
  if (peer == rank_) {
    const char* bytes = static_cast<const char*>(data);
    unexpected_[{peer, tag}].emplace_back(bytes, bytes + size);
    return ncclSuccess;
  }
  Deadline deadline(bootstrapTimeoutSeconds(), abortFlag_, revokeFlag_);
  const std::string what = "sending " + std::to_string(size) + " bytes with tag " + std::to_string(tag) + " to rank " +
                           std::to_string(peer) + " at " + peerAddresses_[peer].toString();
  Socket* socket = nullptr;
  CHORUS_CHECK(peerSocket(peer, deadline, &socket));
  WireHeader header{kMessageMagic, rank_, kWireP2pMessage, tag, size};
  ncclResult_t res = sendProgressing(*socket, &header, sizeof(header), deadline, what);
  if (res == ncclSuccess) res = sendProgressing(*socket, data, size, deadline, what);
  // A half-sent message leaves the stream unusable; a later send starts a new connection.
  if (res != ncclSuccess) socket->close();
  if (res == ncclRemoteError) warnConnectionClosed(peer);  // a bootstrap keeps its connections while it lives
  return res;
}

ncclResult_t RingBootstrap::recv(int peer, int tag, void* data, size_t size) {
  return recvBy(peer, tag, data, size, Deadline(bootstrapTimeoutSeconds(), abortFlag_, revokeFlag_),
                "a message with tag " + std::to_string(tag) + " from rank " + std::to_string(peer));
}

ncclResult_t RingBootstrap::recvForCall(int peer, int tag, void* data, size_t size, double timeoutSec,
                                        const std::string& what, bool* timedOut) {
  // CHORUS_TIMEOUT=0: no limit (INT_MAX seconds, 68 years, to a Deadline).
  const int seconds = timeoutSec > 0 ? static_cast<int>(std::ceil(timeoutSec)) : std::numeric_limits<int>::max();
  Deadline deadline(seconds, abortFlag_, revokeFlag_);
  const ncclResult_t result = recvBy(peer, tag, data, size, deadline.fromSetting("CHORUS_TIMEOUT"), what);
  // A peer that never reached its call stalled, as a call's own timeout says.
  *timedOut = result == ncclSystemError && deadline.expired() && !deadline.aborted() && !deadline.revoked();
  return *timedOut ? ncclRemoteError : result;
}

ncclResult_t RingBootstrap::recvBy(int peer, int tag, void* data, size_t size, const Deadline& deadline,
                                   const std::string& what) {
  CHORUS_CHECK(checkPeer(peer, "recv"));
  for (;;) {
    auto it = unexpected_.find({peer, tag});
    if (it != unexpected_.end()) {
      std::vector<char> message = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) unexpected_.erase(it);
      if (message.size() != size) {
        WARN("Bootstrap recv: message with tag %d from rank %d has %zu bytes, expected %zu", tag, peer, message.size(),
             size);
        return ncclInternalError;
      }
      if (size > 0) memcpy(data, message.data(), size);
      return ncclSuccess;
    }
    if (peer != rank_ && peerClosed_[peer]) {
      WARN("Bootstrap recv: rank %d closed its connection before sending tag %d", peer, tag);
      return ncclRemoteError;
    }
    if (peer == rank_) {
      WARN("Bootstrap recv: no message with tag %d was sent to self (rank %d)", tag, rank_);
      return ncclInvalidUsage;
    }
    CHORUS_CHECK(progress(deadline, what, nullptr, 0));
  }
}

ncclResult_t RingBootstrap::ringExchange(const void* sendData, void* recvData, size_t size, const Deadline& deadline) {
  const char* out = static_cast<const char*>(sendData);
  char* in = static_cast<char*>(recvData);
  size_t sent = 0;
  size_t received = 0;
  const std::string what = "the ring all-gather (rank " + std::to_string(successor()) + " at " +
                           ringSend_.address().toString() + " receiving, rank " + std::to_string(predecessor()) +
                           " sending)";
  while (sent < size || received < size) {
    size_t n = 0;
    if (sent < size) {
      CHORUS_CHECK(ringSend_.trySend(out + sent, size - sent, &n));
      sent += n;
    }
    if (received < size) {
      bool closed = false;
      CHORUS_CHECK(ringRecv_.tryRecv(in + received, size - received, &n, &closed));
      received += n;
      if (closed && received < size) {
        WARN("Bootstrap: rank %d: ring predecessor rank %d closed its connection during an all-gather", rank_,
             predecessor());
        return ncclRemoteError;
      }
    }
    if (sent == size && received == size) break;
    pollfd ring[2];
    size_t count = 0;
    if (sent < size) ring[count++] = {ringSend_.fd(), POLLOUT, 0};
    if (received < size) ring[count++] = {ringRecv_.fd(), POLLIN, 0};
    CHORUS_CHECK(progress(deadline, what, ring, count));
  }
  return ncclSuccess;
}

ncclResult_t RingBootstrap::allGather(void* data, size_t bytesPerRank) {
  if (data == nullptr && bytesPerRank > 0) {
    WARN("Bootstrap allGather: data is null for %zu bytes per rank", bytesPerRank);
    return ncclInvalidArgument;
  }
  if (!ringSend_.valid() && nranks_ > 1) {
    WARN(
        "Bootstrap allGather: rank %d: the ring was closed when an earlier exchange failed; this communicator's "
        "set-up jobs (split, shrink, grow) can no longer run: abort it",
        rank_);
    return ncclInvalidUsage;
  }
  Deadline deadline(bootstrapTimeoutSeconds(), abortFlag_, revokeFlag_);
  char* slots = static_cast<char*>(data);
  // Step i passes on the slot received in step i-1 (our own first).
  for (int step = 0; step < nranks_ - 1; ++step) {
    int sendSlot = (rank_ - step + nranks_) % nranks_;
    int recvSlot = (rank_ - step - 1 + nranks_) % nranks_;
    const ncclResult_t r =
        ringExchange(slots + sendSlot * bytesPerRank, slots + recvSlot * bytesPerRank, bytesPerRank, deadline);
    if (r != ncclSuccess) {
      // The ring is out of step for good: closing it towards the successor fails that
      // rank's exchange at once too, and so on around the ring, instead of leaving the
      // others to wait for their timeout (a rank that aborted instead of joining a split).
      ringSend_.close();
      return r;
    }
  }
  return ncclSuccess;
}

ncclResult_t RingBootstrap::barrier() {
  std::vector<char> bytes(nranks_, 0);
  return allGather(bytes.data(), 1);
}

}  // namespace chorus
