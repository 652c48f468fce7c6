// The Bootstrap of one rank: a listening socket, a socket ring for collective steps,
// and per-peer connections for tagged messages.
//
// No background thread: whoever waits (recv, send, allGather) drives progress, polling
// the listener and every accepted connection, so messages that arrive early land in
// the unexpected queue and peers blocked on us are never starved.
//
// Not thread-safe: one thread at a time calls a given Bootstrap (the communicator
// serializes its bootstrap traffic).
#pragma once

#include <poll.h>

#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/keyed_hash.h"
#include "core/socket.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/bootstrap_auth.h"
#include "src/bootstrap/bootstrap_wire.h"
#include "src/bootstrap/root_client.h"

namespace chorus {

class RingBootstrap final : public Bootstrap {
 public:
  RingBootstrap(int rank, int nranks, uint64_t secret, const std::atomic<uint32_t>* abortFlag, Socket listener);

  // Reports to `root`, forms the ring and learns every rank's address. The first rank of
  // a block also tells the `previous` block's root that it is its last rank's successor.
  ncclResult_t connect(const RootContact& root, const std::optional<RootContact>& previous = std::nullopt);

  ncclResult_t allGather(void* data, size_t bytesPerRank) override;
  ncclResult_t send(int peer, int tag, const void* data, size_t size) override;
  ncclResult_t recv(int peer, int tag, void* data, size_t size) override;
  ncclResult_t recvForCall(int peer, int tag, void* data, size_t size, double timeoutSec, const std::string& what,
                           bool* timedOut) override;
  ncclResult_t barrier() override;

 private:
  // recv and recvForCall: a message from `peer`, waited for until `deadline`.
  ncclResult_t recvBy(int peer, int tag, void* data, size_t size, const Deadline& deadline, const std::string& what);

  // An accepted connection: its hello pending; or an authenticated p2p stream
  // read message by message.
  struct Connection {
    Socket socket;
    int peer = -1;
    PeerHello hello{};
    size_t helloBytes = 0;
    WireHeader header{};
    size_t headerBytes = 0;
    std::vector<char> payload;
    size_t payloadBytes = 0;
    std::chrono::steady_clock::time_point acceptedAt;
  };
  enum class Outcome { Keep, Drop, Taken };

  // One poll round (at most 100 ms) over the listener, the accepted connections and
  // `extra` (whose revents are filled in); fails on timeout or abort naming `what`.
  ncclResult_t progress(const Deadline& deadline, const std::string& what, pollfd* extra, size_t extraCount);
  ncclResult_t acceptQueued();
  Outcome readHello(Connection& connection);
  Outcome readMessages(Connection& connection);
  void dropStalePending();

  ncclResult_t peerSocket(int peer, const Deadline& deadline, Socket** out);
  // Connects to rank `peer`'s listener at `at`; if it refuses for good, a WARN says it is gone
  // and `whyGone`.
  ncclResult_t connectToRank(int peer, const SocketAddress& at, const Deadline& deadline, Socket* out,
                             const char* whyGone);
  // The WARN for a connection to `peer` that its end closed: its bootstrap is gone.
  void warnConnectionClosed(int peer) const;
  // Opens a connection with a PeerHello of `kind`, proven for the listener that announced
  // `listenNonce`. Never waits for the listener: it may not be serving it right now.
  ncclResult_t introduce(Socket& socket, int32_t kind, const uint64_t listenNonce[2], const Deadline& deadline,
                         const std::string& what);
  // Sends while still serving incoming traffic, so two ranks sending to each other cannot deadlock.
  ncclResult_t sendProgressing(Socket& socket, const void* data, size_t size, const Deadline& deadline,
                               const std::string& what);
  // Sends `size` bytes to the successor while receiving `size` from the predecessor.
  ncclResult_t ringExchange(const void* sendData, void* recvData, size_t size, const Deadline& deadline);
  ncclResult_t checkPeer(int peer, const char* call) const;
  int predecessor() const { return (rank_ + nranks_ - 1) % nranks_; }
  int successor() const { return (rank_ + 1) % nranks_; }

  SipKey key_;  // the first id's: what ranks prove to each other
  const std::atomic<uint32_t>* abortFlag_;
  Socket listener_;
  uint64_t listenNonce_[2] = {0, 0};              // announced with our address; hellos to us are proven with it
  std::set<std::pair<int, uint64_t>> helloSeen_;  // (rank, nonce) of every hello taken: each counts once
  DropLog drops_;
  Socket ringSend_;  // to the successor
  Socket ringRecv_;  // from the predecessor
  std::vector<SocketAddress> peerAddresses_;
  std::vector<std::array<uint64_t, 2>> peerNonces_;  // each rank's listener's, from the all-gather
  std::vector<Socket> outgoing_;                     // per peer, opened on first send
  std::vector<bool> peerClosed_;                     // the peer's p2p connection to us ended
  std::vector<Connection> pending_;                  // accepted, hello not complete
  std::vector<Connection> incoming_;                 // authenticated p2p connections
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> unexpected_;  // (peer, tag) -> messages
};

}  // namespace chorus
