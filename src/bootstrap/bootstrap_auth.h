// The listening side of the bootstrap's proof (see bootstrap_wire.h): challenges for the
// connections a root or a rank accepts, and the summary of those that fail to answer them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "core/socket.h"
#include "nccl.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {

// Fills `size` bytes from getrandom(); `what` names the use in the WARN on failure.
ncclResult_t randomBytes(void* data, size_t size, const char* what);

// Sends a fresh challenge on a just-accepted connection, without waiting: its few bytes
// always fit in the empty send buffer of a new connection. False (with `*why`) when the
// connection is already gone; the caller drops it.
bool sendChallenge(Socket& socket, Challenge* challenge, std::string* why);

// Connecting side: whether the listener's first bytes are a challenge; WARNs naming
// `listener` when not (a connection that reached something other than a bootstrap listener).
bool challengeValid(const Challenge& challenge, const std::string& listener);

// Connections a listener dropped because they did not prove they hold the secret (wrong
// proof, silence, closed early): each an INFO, together one WARN per 10 s per listener and
// one for the rest when the listener closes, so a port scanner cannot flood the log.
class DropLog {
 public:
  explicit DropLog(std::string listener) : listener_(std::move(listener)) {}
  ~DropLog();
  DropLog(const DropLog&) = delete;
  DropLog& operator=(const DropLog&) = delete;

  void dropped(const std::string& why);
  // Forgets what is not reported yet, without a word (a forked child's copy of a listener).
  void discard() { unreported_ = 0; }

 private:
  void report();

  std::string listener_;
  size_t unreported_ = 0;
  std::string latest_;
  std::chrono::steady_clock::time_point lastReport_{};
};

}  // namespace chorus
