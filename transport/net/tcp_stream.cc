#include "transport/net/tcp_stream.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"

namespace chorus {

void TcpStream::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStream::closeWhenDelivered() {
  if (fd_ < 0) return;
  constexpr int kStallMs = 2000, kLimitMs = 5000;  // about: each round sleeps 1 ms or more
  char dropped[256];
  auto dropInput = [&] {
    ssize_t n;
    while ((n = ::recv(fd_, dropped, sizeof(dropped), MSG_DONTWAIT)) > 0) {
    }
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);  // closed or failed
  };
  int unacked = -1;
  for (int waited = 0, stalled = 0; waited < kLimitMs && stalled < kStallMs; ++waited) {
    if (dropInput()) break;  // the peer closed or reset: nothing more can be delivered
    int queued = 0;
    if (ioctl(fd_, SIOCOUTQ, &queued) != 0 || queued == 0) break;
    stalled = queued == unacked ? stalled + 1 : 0;
    unacked = queued;
    poll(nullptr, 0, 1);
  }
  dropInput();
  close();
}

ncclResult_t TcpStream::setTrafficClass(int trafficClass) {
  const bool v6 = peer_.family() == AF_INET6;
  const int level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
  const int option = v6 ? IPV6_TCLASS : IP_TOS;
  if (setsockopt(fd_, level, option, &trafficClass, sizeof(trafficClass)) != 0) {
    WARN("NET/Socket: setsockopt(%s, %d) for the connection to %s failed: %s", v6 ? "IPV6_TCLASS" : "IP_TOS",
         trafficClass, peer_.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t TcpStream::startConnect(const SocketAddress& address, TcpStream* out) {
  TcpStream stream(::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), address);
  if (!stream.valid()) {
    WARN("NET/Socket: socket() for connecting to %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  stream.setStreamOptions();
  int rc = ::connect(stream.fd_, address.sa(), address.length());
  // Interrupted or not: a non-blocking connect goes on in the background.
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    WARN("NET/Socket: connect() to %s failed: %s", address.toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
  stream.connected_ = rc == 0;
  *out = std::move(stream);
  return ncclSuccess;
}

ncclResult_t TcpStream::pollConnected(bool* connected) {
  if (!connected_) {
    pollfd pfd{fd_, POLLOUT, 0};
    if (poll(&pfd, 1, 0) <= 0) {
      *connected = false;
      return ncclSuccess;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      WARN("NET/Socket: connect() to %s failed: %s", peerName().c_str(), strerror(err));
      return ncclSystemError;
    }
    connected_ = true;
  }
  *connected = true;
  return ncclSuccess;
}

ncclResult_t TcpStream::tryAccept(const Socket& listener, TcpStream* out, bool* outOfDescriptors) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      SocketAddress address;
      address.assign(reinterpret_cast<sockaddr*>(&peer), len);
      *out = TcpStream(fd, address);
      out->connected_ = true;
      out->setStreamOptions();
      return ncclSuccess;
    }
    if (errno == EINTR || acceptedConnectionFailed(errno)) continue;  // that connection died first
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (acceptOutOfDescriptors(errno)) {
      if (outOfDescriptors) *outOfDescriptors = true;
      return ncclSuccess;
    }
    WARN("NET/Socket: accept() on %s failed: %s", listener.address().toString().c_str(), strerror(errno));
    return ncclSystemError;
  }
}

ncclResult_t TcpStream::sendSome(const void* data, size_t size, size_t* sent) {
  return sendSome(data, size, nullptr, 0, sent);
}

ncclResult_t TcpStream::sendSome(const void* first, size_t firstSize, const void* second, size_t secondSize,
                                 size_t* sent, bool warn) {
  *sent = 0;
  const size_t size = firstSize + secondSize;
  while (*sent < size) {
    // What is left of the two ranges.
    iovec parts[2];
    int count = 0;
    if (*sent < firstSize)
      parts[count++] = {const_cast<char*>(static_cast<const char*>(first)) + *sent, firstSize - *sent};
    if (secondSize > 0) {
      const size_t done = *sent > firstSize ? *sent - firstSize : 0;
      parts[count++] = {const_cast<char*>(static_cast<const char*>(second)) + done, secondSize - done};
    }
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<size_t>(count);
    ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (n > 0) {
      *sent += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      int err = errno;
      if (warn) WARN("NET/Socket: send() to %s failed: %s", peerName().c_str(), strerror(err));
      return err == EPIPE || err == ECONNRESET ? ncclRemoteError : ncclSystemError;
    }
  }
  return ncclSuccess;
}

ncclResult_t TcpStream::recvSome(void* data, size_t size, size_t* received, bool* closed) {
  *received = 0;
  *closed = false;
  while (*received < size) {
    size_t n = 0;
    CHORUS_CHECK(recvOnce(static_cast<char*>(data) + *received, size - *received, &n, closed));
    *received += n;
    if (n == 0 || *closed) return ncclSuccess;  // nothing more there now, or the peer closed
  }
  return ncclSuccess;
}

ncclResult_t TcpStream::recvOnce(void* data, size_t size, size_t* received, bool* closed) {
  *received = 0;
  *closed = false;
  for (;;) {
    const ssize_t n = ::recv(fd_, data, size, 0);
    if (n > 0) {
      *received = static_cast<size_t>(n);
      return ncclSuccess;
    }
    if (n == 0 || errno == ECONNRESET) {
      *closed = true;
      return ncclSuccess;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (errno != EINTR) {
      WARN("NET/Socket: recv() from %s failed: %s", peerName().c_str(), strerror(errno));
      return ncclSystemError;
    }
  }
}

// Messages are latency-bound headers followed by payload chunks: do not let Nagle hold them.
// Keepalive and a user timeout notice a peer host that vanished without closing (power
// loss, a cut link) within about 25 s, under the 30 s the dead-peer rule allows: a
// process that dies is noticed at once, its kernel closes the connection.
void TcpStream::setStreamOptions() {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int idleSec = 10, intervalSec = 5, probes = 3;
  unsigned int userTimeoutMs = 25000;
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idleSec, sizeof(idleSec));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &intervalSec, sizeof(intervalSec));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof(userTimeoutMs));
}

}  // namespace chorus
