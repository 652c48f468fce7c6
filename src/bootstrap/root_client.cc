#include "src/bootstrap/root_client.h"

#include <poll.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/debug.h"
#include "src/bootstrap/bootstrap_auth.h"

namespace chorus {
namespace {

// Reads a root's challenge. `*closedFirst`: the root closed the connection before sending
// any of it (it ended with the connection in its queue), for the caller to WARN.
ncclResult_t recvChallenge(Socket& socket, const Deadline& deadline, Challenge* challenge, bool* closedFirst) {
  char* bytes = reinterpret_cast<char*>(challenge);
  size_t got = 0;
  *closedFirst = false;
  while (got < sizeof(*challenge)) {
    CHORUS_CHECK(
        waitForFd(socket.fd(), POLLIN, deadline, "the challenge of the root at " + socket.address().toString()));
    size_t received = 0;
    bool closed = false;
    CHORUS_CHECK(socket.tryRecv(bytes + got, sizeof(*challenge) - got, &received, &closed));
    got += received;
    if (closed && got < sizeof(*challenge)) {
      *closedFirst = got == 0;
      if (got > 0) {
        WARN("Bootstrap: the root at %s closed the connection after %zu of %zu bytes of its challenge",
             socket.address().toString().c_str(), got, sizeof(*challenge));
      }
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

// Text a peer sent, for a log line: up to its first NUL within `size` bytes, anything that
// is not printable ASCII shown as '?'.
std::string printableText(const char* text, size_t size) {
  std::string out(text, strnlen(text, size));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

}  // namespace

ncclResult_t reportToRoot(const RootContact& root, const RootHello& hello, const Deadline& deadline, RootAnswer* answer,
                          bool* explained) {
  const std::string rootText = root.address.toString();
  *explained = false;
  const auto rootGone = [&](const char* how) {
    *explained = true;
    WARN(
        "Bootstrap: rank %d of %d: the unique id's root at %s is gone (%s). A root serves one communicator and ends "
        "once its ranks are answered (each ncclCommInitRank* needs an id of its own), at CHORUS_BOOTSTRAP_TIMEOUT, "
        "or with its process",
        hello.rank, hello.nranks, rootText.c_str(), how);
    return ncclRemoteError;
  };
  // The root runs on a thread (or process) of its own: plain blocking waits are fine here.
  Socket socket;
  Challenge challenge{};
  for (;;) {
    bool refused = false;
    const ncclResult_t connected =
        Socket::connect(root.address, deadline, &socket, root.startedByRank ? nullptr : &refused);
    if (refused) return rootGone("it refuses connections");
    CHORUS_CHECK(connected);
    bool closedFirst = false;
    const ncclResult_t challenged = recvChallenge(socket, deadline, &challenge, &closedFirst);
    if (!closedFirst) {
      CHORUS_CHECK(challenged);
      break;
    }
    // The root ended with this connection in its queue. Under NCCL_COMM_ID the block's first
    // rank starts the next root at the same address, perhaps not yet: try again.
    if (!root.startedByRank) return rootGone("it closed the connection before its challenge");
    socket.close();
    CHORUS_CHECK(deadline.check("the root at " + rootText));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!challengeValid(challenge, "the root at " + rootText)) return ncclSystemError;
  RootHello proven = hello;
  proven.proof = rootHelloProof(bootstrapKey(root.secret), challenge, proven);
  CHORUS_CHECK(socket.sendAll(&proven, sizeof(proven), deadline));
  if (answer == nullptr) return ncclSuccess;

  RootReply reply{};
  CHORUS_CHECK(socket.recvAll(&reply, sizeof(reply), deadline));
  if (reply.refused != 0) {
    *explained = true;
    WARN("Bootstrap: rank %d of %d: the root at %s refused the communicator: %s", hello.rank, hello.nranks,
         rootText.c_str(), printableText(reply.reason, sizeof(reply.reason)).c_str());
    return ncclInvalidUsage;
  }
  if (!answer->successor.assign(reinterpret_cast<const sockaddr*>(&reply.successorAddress),
                                sizeof(reply.successorAddress))) {
    *explained = true;
    WARN("Bootstrap: rank %d: the root at %s sent no usable successor address", hello.rank, rootText.c_str());
    return ncclInternalError;
  }
  answer->successorNonce[0] = reply.successorNonce[0];
  answer->successorNonce[1] = reply.successorNonce[1];
  return ncclSuccess;
}

}  // namespace chorus
