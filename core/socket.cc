#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/debug.h"

namespace chorus {

// ---- SocketAddress ----

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

socklen_t SocketAddress::length() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string SocketAddress::hostToString() const {
  char host[INET6_ADDRSTRLEN] = "";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
    return host;
  }
  if (family() == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
    char ifname[IF_NAMESIZE] = "";
    if (sin6->sin6_scope_id == 0 || if_indextoname(sin6->sin6_scope_id, ifname) == nullptr) return host;
    char scoped[INET6_ADDRSTRLEN + IF_NAMESIZE + 1];
    snprintf(scoped, sizeof(scoped), "%s%%%s", host, ifname);  // snprintf: g++ 12 warns falsely on +=
    return scoped;
  }
  return "<no address>";
}

std::string SocketAddress::toString() const {
  if (!valid()) return "<no address>";
  // snprintf rather than string concatenation: g++ 12 -O3 warns falsely (-Wrestrict) on the latter.
  char text[INET6_ADDRSTRLEN + IF_NAMESIZE + 16];
  const char* format = family() == AF_INET6 ? "[%s]:%u" : "%s:%u";
  snprintf(text, sizeof(text), format, hostToString().c_str(), static_cast<unsigned>(port()));
  return text;
}

bool SocketAddress::assign(const sockaddr* address, socklen_t length) {
  storage = sockaddr_storage{};
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET && length >= sizeof(sockaddr_in)) {
    memcpy(&storage, address, sizeof(sockaddr_in));
    return true;
  }
  if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    memcpy(&storage, address, sizeof(sockaddr_in6));
    return true;
  }
  return false;
}

// ---- Deadline ----

Deadline::Deadline(int timeoutSeconds, const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag)
    : end_(std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSeconds)),
      timeoutSeconds_(timeoutSeconds),
      abortFlag_(abortFlag),
      revokeFlag_(revokeFlag),
      revokeAtStart_(revokeFlag ? revokeFlag->load(std::memory_order_acquire) : 0) {}

ncclResult_t Deadline::check(const std::string& what) const {
  if (aborted()) {
    WARN("Bootstrap: aborted while waiting for %s", what.c_str());
    return ncclSystemError;
  }
  if (revoked()) {
    WARN("Bootstrap: the communicator was revoked (ncclCommRevoke) while waiting for %s", what.c_str());
    return ncclSystemError;
  }
  if (expired()) {
    WARN("Bootstrap: timed out after %d s waiting for %s (%s)", timeoutSeconds_, what.c_str(), setting_);
    return ncclSystemError;
  }
  return ncclSuccess;
}

int Deadline::pollSliceMs() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 100));
}

ncclResult_t waitForFd(int fd, short events, const Deadline& deadline, const std::string& what) {
  for (;;) {
    CHORUS_CHECK(deadline.check(what));
    pollfd pfd{fd, events, 0};
    int n = poll(&pfd, 1, deadline.pollSliceMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      WARN("Bootstrap: poll failed while waiting for %s: %s", what.c_str(), strerror(errno));
      return ncclSystemError;
    }
    // Errors and hang-ups count as ready: the following call reports them.
    if (n > 0 && (pfd.revents & (events | POLLERR | POLLHUP | POLLNVAL)) != 0) return ncclSuccess;
  }
}

// ---- Socket ----

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), address_(other.address_) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    address_ = other.address_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

int newSocketFd(int family) { return ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool peerClosedErrno(int err) { return err == ECONNRESET || err == EPIPE; }

}  // namespace

ncclResult_t Socket::listen(const SocketAddress& address, Socket* out, bool* inUse) {
  if (!address.valid()) {
    WARN("Bootstrap: cannot listen on %s: not an IPv4 or IPv6 address", address.toString().c_str());
    return ncclInternalError;
  }
  int fd = newSocketFd(address.family());
  if (fd < 0) {
    WARN("Bootstrap: socket() for listening on %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  Socket sock(fd, address);
  int one = 1;
  // A fixed port (NCCL_COMM_ID) must be reusable right after a previous run.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (inUse != nullptr) *inUse = false;
  if (bind(fd, address.sa(), address.length()) != 0) {
    if (inUse != nullptr && errno == EADDRINUSE) {
      *inUse = true;
      return ncclSystemError;
    }
    WARN("Bootstrap: bind() to %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  if (::listen(fd, SOMAXCONN) != 0) {
    WARN("Bootstrap: listen() on %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    WARN("Bootstrap: getsockname() on %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  sock.address_.assign(reinterpret_cast<sockaddr*>(&bound), len);
  *out = std::move(sock);
  return ncclSuccess;
}

ncclResult_t Socket::connect(const SocketAddress& address, const Deadline& deadline, Socket* out, bool* gone) {
  if (!address.valid()) {
    WARN("Bootstrap: cannot connect to %s: not an IPv4 or IPv6 address", address.toString().c_str());
    return ncclInternalError;
  }
  const std::string what = "a connection to " + address.toString();
  int retries = 0;
  bool refusing = false;  // the last attempts were refused, the first of them at refusedSince
  std::chrono::steady_clock::time_point refusedSince;
  if (gone != nullptr) *gone = false;
  for (;;) {
    CHORUS_CHECK(deadline.check(what));
    int fd = newSocketFd(address.family());
    if (fd < 0) {
      WARN("Bootstrap: socket() for connecting to %s failed: %s", address.toString().c_str(), strerror(errno));
      return ncclSystemError;
    }
    Socket sock(fd, address);
    setNoDelay(fd);
    int err = 0;
    if (::connect(fd, address.sa(), address.length()) != 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      CHORUS_CHECK(waitForFd(fd, POLLOUT, deadline, what));
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) {
      *out = std::move(sock);
      return ncclSuccess;
    }
    // Refused: the listener is not up yet. Timed out: a transient network hiccup.
    if (err != ECONNREFUSED && err != ETIMEDOUT) {
      WARN("Bootstrap: connect() to %s failed: %s", address.toString().c_str(), strerror(err));
      return ncclSystemError;
    }
    // A listener that was up refuses only once it is closed. A full accept queue drops
    // connection requests rather than refusing them, so this is not a busy listener.
    const auto now = std::chrono::steady_clock::now();
    if (err != ECONNREFUSED) {
      refusing = false;
    } else if (!refusing) {
      refusing = true;
      refusedSince = now;
    } else if (gone != nullptr && now - refusedSince >= std::chrono::seconds(kGoneAfterSeconds)) {
      *gone = true;
      return ncclRemoteError;
    }
    if (++retries % 100 == 0)
      INFO(kSubsysBootstrap, "Bootstrap: connect() to %s: %s, retrying", address.toString().c_str(), strerror(err));
    // Back off briefly; the abort flag and deadline are checked at the top of the loop.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(retries, 20) * 5));
  }
}

bool acceptOutOfDescriptors(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

bool acceptedConnectionFailed(int err) {
  switch (err) {
    case ECONNABORTED:
    case ENETDOWN:
    case EPROTO:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
      return true;
    default:
      return false;
  }
}

void warnOutOfDescriptors(const std::string& where, size_t shed) {
  static std::mutex mutex;
  static std::chrono::steady_clock::time_point last{};
  static size_t suppressed = 0;
  std::lock_guard<std::mutex> lock(mutex);
  const auto now = std::chrono::steady_clock::now();
  if (last != std::chrono::steady_clock::time_point{} && now - last < std::chrono::seconds(10)) {
    ++suppressed;
    return;
  }
  WARN(
      "accept() on %s ran out of file descriptors (%zu such event(s) since the last report); closed %zu connection(s) "
      "that had not proved themselves yet, and keep accepting (raise ulimit -n if this persists)",
      where.c_str(), suppressed + 1, shed);
  last = now;
  suppressed = 0;
}

ncclResult_t Socket::tryAccept(Socket* out, bool* outOfDescriptors) {
  out->close();
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      SocketAddress peerAddress;
      peerAddress.assign(reinterpret_cast<sockaddr*>(&peer), len);
      *out = Socket(fd, peerAddress);
      setNoDelay(fd);
      return ncclSuccess;
    }
    // A connection that died before we took it: not our error; the next may be there.
    if (errno == EINTR || acceptedConnectionFailed(errno)) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;  // nothing queued
    if (acceptOutOfDescriptors(errno)) {
      if (outOfDescriptors) *outOfDescriptors = true;
      return ncclSuccess;
    }
    WARN("Bootstrap: accept() on %s failed: %s", address_.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
}

ncclResult_t Socket::accept(const Deadline& deadline, Socket* out) {
  const std::string what = "a connection on " + address_.toString();
  for (;;) {
    CHORUS_CHECK(waitForFd(fd_, POLLIN, deadline, what));
    CHORUS_CHECK(tryAccept(out));
    if (out->valid()) return ncclSuccess;
  }
}

ncclResult_t Socket::trySend(const void* data, size_t size, size_t* sent) {
  *sent = 0;
  const char* bytes = static_cast<const char*>(data);
  while (*sent < size) {
    ssize_t n = ::send(fd_, bytes + *sent, size - *sent, MSG_NOSIGNAL);
    if (n > 0) {
      *sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    int err = errno;
    WARN("Bootstrap: send() to %s failed: %s", address_.toString().c_str(), strerror(err));
    return peerClosedErrno(err) ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t Socket::tryRecv(void* data, size_t size, size_t* received, bool* closed) {
  *received = 0;
  *closed = false;
  char* bytes = static_cast<char*>(data);
  while (*received < size) {
    ssize_t n = ::recv(fd_, bytes + *received, size - *received, 0);
    if (n > 0) {
      *received += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      *closed = true;
      return ncclSuccess;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (peerClosedErrno(errno)) {
      *closed = true;
      return ncclSuccess;
    }
    WARN("Bootstrap: recv() from %s failed: %s", address_.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t Socket::sendAll(const void* data, size_t size, const Deadline& deadline) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    size_t sent = 0;
    CHORUS_CHECK(trySend(bytes + done, size - done, &sent));
    done += sent;
    if (done < size) {
      CHORUS_CHECK(
          waitForFd(fd_, POLLOUT, deadline, "sending " + std::to_string(size) + " bytes to " + address_.toString()));
    }
  }
  return ncclSuccess;
}

ncclResult_t Socket::recvAll(void* data, size_t size, const Deadline& deadline) {
  char* bytes = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    size_t received = 0;
    bool closed = false;
    CHORUS_CHECK(tryRecv(bytes + done, size - done, &received, &closed));
    done += received;
    if (closed && done < size) {
      WARN("Bootstrap: recv() from %s: connection closed by the peer after %zu of %zu bytes",
           address_.toString().c_str(), done, size);
      return ncclRemoteError;
    }
    if (done < size) {
      CHORUS_CHECK(waitForFd(fd_, POLLIN, deadline, std::to_string(size) + " bytes from " + address_.toString()));
    }
  }
  return ncclSuccess;
}

}  // namespace chorus
