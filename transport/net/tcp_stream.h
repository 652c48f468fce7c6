// A non-blocking TCP stream for the socket net: connect, accept and partial send/recv
// that never wait: the socket net moves only what the kernel takes or holds at each
// test() (or, with NCCL_SOCKET_NTHREADS >= 2, at each step of a helper thread, which
// waits in poll() on fd()).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "core/socket.h"
#include "nccl.h"

namespace chorus {

// A connected (or connecting) non-blocking TCP socket that owns its fd.
class TcpStream {
 public:
  TcpStream() = default;
  ~TcpStream() { close(); }
  TcpStream(TcpStream&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), peer_(other.peer_), connected_(other.connected_) {}
  TcpStream& operator=(TcpStream&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
      peer_ = other.peer_;
      connected_ = other.connected_;
    }
    return *this;
  }

  bool valid() const { return fd_ >= 0; }
  // For poll() in the socket net's helper threads, which wait on their data sockets.
  int fd() const { return fd_; }
  std::string peerName() const { return peer_.toString(); }
  void close();
  // Closes once the peer's kernel has acknowledged every byte sent, reading and dropping
  // what arrives meanwhile: a close with unread input resets the connection, and a reset
  // drops what was not delivered yet (the end of the last message). Stops waiting when the
  // peer closes or resets, when it takes nothing for 2 s (hung; a descheduled but live
  // receiver is given that long), and after 5 s in all. For a normal close only: the socket
  // net skips it for a connection that failed (SocketComm::abandon).
  void closeWhenDelivered();

  // Starts connecting to `address` without waiting; pollConnected() says when it is done.
  static ncclResult_t startConnect(const SocketAddress& address, TcpStream* out);
  ncclResult_t pollConnected(bool* connected);
  // The traffic class of what this socket sends (IP_TOS, or IPV6_TCLASS), 0-255.
  ncclResult_t setTrafficClass(int trafficClass);

  // Takes one queued connection off `listener`; `*out` stays invalid when there is none.
  // Out of descriptors is transient, as for Socket::tryAccept (`*outOfDescriptors`).
  static ncclResult_t tryAccept(const Socket& listener, TcpStream* out, bool* outOfDescriptors = nullptr);

  // Move what the kernel takes or holds right now. A peer that closed the connection
  // sets `*closed` (receive) or fails with ncclRemoteError (send).
  ncclResult_t sendSome(const void* data, size_t size, size_t* sent);
  // The same for two byte ranges back to back (a header and its payload), in one sendmsg().
  // `warn` false: a failure is only returned (a best-effort message to a peer that may be gone).
  ncclResult_t sendSome(const void* first, size_t firstSize, const void* second, size_t secondSize, size_t* sent,
                        bool warn = true);
  ncclResult_t recvSome(void* data, size_t size, size_t* received, bool* closed);
  // One recv() of at most `size` bytes (EINTR retried): what the kernel holds now, without
  // the second call recvSome makes to learn that nothing more is there.
  ncclResult_t recvOnce(void* data, size_t size, size_t* received, bool* closed);

 private:
  TcpStream(int fd, const SocketAddress& peer) : fd_(fd), peer_(peer) {}
  void setStreamOptions();  // TCP_NODELAY, keepalive, user timeout

  int fd_ = -1;
  SocketAddress peer_;
  bool connected_ = false;
};

}  // namespace chorus
