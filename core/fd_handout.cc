#include "core/fd_handout.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "core/debug.h"
#include "core/thread_name.h"

namespace chorus {
namespace {

constexpr int kRequestTimeoutMs = 1000;  // how long one client may take to send its token

using Token = std::array<uint8_t, sizeof(FdTicket::token)>;

sockaddr_un abstractAddress(const char* name, socklen_t* length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const size_t n = strnlen(name, sizeof(address.sun_path) - 1);
  memcpy(address.sun_path + 1, name, n);  // sun_path[0] stays NUL: the abstract namespace
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return address;
}

// Reads exactly `bytes` before `deadlineMs` (from now) passes; false on EOF, error or time out.
bool readFully(int fd, void* data, size_t bytes, int deadlineMs) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadlineMs);
  size_t done = 0;
  while (done < bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = recv(fd, static_cast<char*>(data) + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The process's server: its listening socket, the offers, and the thread that serves them.
// Never destroyed (used until exit, by a detached thread).
class FdServer {
 public:
  // The process's server, started on first use; a child made by fork() starts its own (the
  // parent's thread did not come along), closing the listener it inherited.
  static FdServer* instance(std::string* why) {
    static std::mutex mutex;
    static FdServer* server = nullptr;
    static pid_t owner = 0;
    static std::string failure;
    std::lock_guard<std::mutex> lock(mutex);
    if (server != nullptr && owner != getpid()) {
      close(server->listener_);
      server = nullptr;  // the parent's: left as it is
      failure.clear();
    }
    if (server == nullptr && failure.empty()) {
      auto* s = new FdServer();
      if (s->listen(&failure)) {
        server = s;
        owner = getpid();
      } else {
        delete s;
      }
    }
    if (server == nullptr) *why = failure;
    return server;
  }

  const char* name() const { return name_; }

  ncclResult_t offer(int fd, Token* token) {
    const int copy = dup(fd);
    if (copy < 0) {
      WARN("fd handout: dup(%d) failed: %s", fd, strerror(errno));
      return ncclSystemError;
    }
    if (getrandom(token->data(), token->size(), 0) != static_cast<ssize_t>(token->size())) {
      WARN("fd handout: getrandom failed: %s", strerror(errno));
      close(copy);
      return ncclSystemError;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    offers_[*token] = copy;
    return ncclSuccess;
  }

  void withdraw(const Token& token) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = offers_.find(token);
    if (it == offers_.end()) return;
    close(it->second);
    offers_.erase(it);
  }

 private:
  bool listen(std::string* why) {
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) nonce = reinterpret_cast<uintptr_t>(this);
    snprintf(name_, sizeof(name_), "chorus-fd-%d-%016llx", static_cast<int>(getpid()),
             static_cast<unsigned long long>(nonce));
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0) {
      *why = std::string("socket(AF_UNIX): ") + strerror(errno);
      return false;
    }
    socklen_t length = 0;
    const sockaddr_un address = abstractAddress(name_, &length);
    if (bind(listener_, reinterpret_cast<const sockaddr*>(&address), length) != 0 || ::listen(listener_, 64) != 0) {
      *why = std::string("bind/listen on @") + name_ + ": " + strerror(errno);
      close(listener_);
      return false;
    }
    std::thread([this] { serve(); }).detach();
    return true;
  }

  void serve() {
    nameThisThread("NCCL FdHandout");
    for (;;) {
      const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        // Out of descriptors, or a client gone before accept: wait a little, go on.
        if (errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      answer(client);
      close(client);
    }
  }

  // One request: a token; the answer is one byte (1: the descriptor comes with it).
  void answer(int client) {
    Token token;
    if (!readFully(client, token.data(), token.size(), kRequestTimeoutMs)) return;  // junk or too slow: dropped
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = offers_.find(token);
      if (it != offers_.end()) {
        fd = it->second;
        offers_.erase(it);  // one redemption per offer
      }
    }
    sendFdAnswer(client, fd >= 0 ? 1 : 0, fd);
    if (fd >= 0) close(fd);
  }

  char name_[sizeof(FdTicket::socketName)] = {};
  int listener_ = -1;
  std::mutex mutex_;
  std::map<Token, int> offers_;
};

Token tokenOf(const FdTicket& ticket) {
  Token token;
  memcpy(token.data(), ticket.token, token.size());
  return token;
}

}  // namespace

void sendFdAnswer(int socket, char status, int fd) {
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  while (sendmsg(socket, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

ncclResult_t offerFd(int fd, FdTicket* ticket) {
  std::string why;
  FdServer* server = FdServer::instance(&why);
  if (server == nullptr) {
    WARN("fd handout: this process cannot serve descriptors: %s", why.c_str());
    return ncclSystemError;
  }
  *ticket = FdTicket{};
  snprintf(ticket->socketName, sizeof(ticket->socketName), "%s", server->name());
  Token token;
  CHORUS_CHECK(server->offer(fd, &token));
  memcpy(ticket->token, token.data(), token.size());
  return ncclSuccess;
}

void withdrawFd(const FdTicket& ticket) {
  std::string why;
  if (FdServer* server = FdServer::instance(&why)) server->withdraw(tokenOf(ticket));
}

ncclResult_t redeemFd(const FdTicket& ticket, int peerRank, double timeoutSec, int* fd) {
  *fd = -1;
  char name[sizeof(ticket.socketName) + 1];
  snprintf(name, sizeof(name), "%.*s", static_cast<int>(sizeof(ticket.socketName)), ticket.socketName);
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    WARN("fd handout: socket(AF_UNIX) to reach rank %d failed: %s", peerRank, strerror(errno));
    return ncclSystemError;
  }
  socklen_t length = 0;
  const sockaddr_un address = abstractAddress(name, &length);
  if (connect(sock, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    WARN(
        "fd handout: connect to rank %d's descriptor server @%s failed: %s (its process is gone, or in another "
        "network namespace)",
        peerRank, name, strerror(errno));
    close(sock);
    return ncclRemoteError;
  }
  const Token token = tokenOf(ticket);
  if (send(sock, token.data(), token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(token.size())) {
    WARN("fd handout: sending the ticket to rank %d failed: %s", peerRank, strerror(errno));
    close(sock);
    return ncclRemoteError;
  }
  // A signal (CHORUS_REPORT_SIGNAL, the application's own) interrupts poll() and recvmsg():
  // both go on with what is left of the wait.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSec);
  int ready = 0;
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{sock, POLLIN, 0};
    ready = poll(&p, 1, static_cast<int>(std::clamp(left * 1000, 0.0, 3.6e6)));  // at most an hour a round
    if (ready > 0 || (ready == 0 && left <= 0) || (ready < 0 && errno != EINTR)) break;
  }
  const int pollErrno = errno;
  char status = 0;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = -1;
  if (ready > 0) {
    do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
  }
  const int savedErrno = errno;
  close(sock);
  if (ready < 0) {
    WARN("fd handout: poll() for rank %d's descriptor server failed: %s", peerRank, strerror(pollErrno));
    return ncclSystemError;
  }
  if (ready == 0) {
    WARN("fd handout: rank %d's descriptor server did not answer within %.0f s", peerRank, timeoutSec);
    return ncclSystemError;
  }
  if (n != 1) {
    WARN("fd handout: rank %d's descriptor server closed the connection without an answer%s%s", peerRank,
         n < 0 ? ": " : "", n < 0 ? strerror(savedErrno) : "");
    return ncclRemoteError;
  }
  const cmsghdr* c = CMSG_FIRSTHDR(&msg);
  const bool carriesFd = c != nullptr && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int));
  if (status != 1 || !carriesFd) {
    if (carriesFd) {  // a refusal that came with a descriptor anyway: not kept open
      int stray = -1;
      memcpy(&stray, CMSG_DATA(c), sizeof(int));
      close(stray);
    }
    WARN("fd handout: rank %d does not offer the descriptor asked for (withdrawn, or already taken)", peerRank);
    return ncclRemoteError;
  }
  memcpy(fd, CMSG_DATA(c), sizeof(int));
  return ncclSuccess;
}

}  // namespace chorus
