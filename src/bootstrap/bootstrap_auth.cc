#include "src/bootstrap/bootstrap_auth.h"

#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"

namespace chorus {
namespace {
constexpr auto kReportInterval = std::chrono::seconds(10);
}  // namespace

ncclResult_t randomBytes(void* data, size_t size, const char* what) {
  char* bytes = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = getrandom(bytes + done, size - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      WARN("Bootstrap: getrandom() for %s failed: %s", what, strerror(errno));
      return ncclSystemError;
    }
    done += static_cast<size_t>(n);
  }
  return ncclSuccess;
}

bool sendChallenge(Socket& socket, Challenge* challenge, std::string* why) {
  challenge->magic = kChallengeMagic;
  if (randomBytes(challenge->nonce, sizeof(challenge->nonce), "a connection's challenge") != ncclSuccess) {
    *why = "no random nonce for its challenge";
    return false;
  }
  // Not Socket::trySend: a peer that is already gone is junk to count, not a WARN of its own.
  for (;;) {
    ssize_t n = ::send(socket.fd(), challenge, sizeof(*challenge), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof(*challenge))) return true;
    if (n < 0 && errno == EINTR) continue;
    *why = n < 0 ? std::string("the challenge could not be sent: ") + strerror(errno)
                 : "the challenge did not fit in a new connection's send buffer";
    return false;
  }
}

bool challengeValid(const Challenge& challenge, const std::string& listener) {
  if (challenge.magic == kChallengeMagic) return true;
  WARN("Bootstrap: %s did not open the connection with a bootstrap challenge (is it a Chorus bootstrap listener?)",
       listener.c_str());
  return false;
}

DropLog::~DropLog() {
  if (unreported_ > 0) report();
}

void DropLog::dropped(const std::string& why) {
  INFO(kSubsysBootstrap, "%s dropped a connection %s", listener_.c_str(), why.c_str());
  ++unreported_;
  latest_ = why;
  const auto now = std::chrono::steady_clock::now();
  if (lastReport_ == std::chrono::steady_clock::time_point{} || now - lastReport_ >= kReportInterval) report();
}

void DropLog::report() {
  WARN(
      "%s dropped %zu connection(s) that did not prove they hold the unique id's secret (latest: %s); the "
      "communicator is not affected",
      listener_.c_str(), unreported_, latest_.c_str());
  unreported_ = 0;
  lastReport_ = std::chrono::steady_clock::now();
}

}  // namespace chorus
