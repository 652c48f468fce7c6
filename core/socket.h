// TCP sockets for the bootstrap network: an owning, move-only Socket over a
// non-blocking fd, IPv4 and IPv6 addresses, and deadline-bounded waits that also
// watch an abort flag.
//
// Every wait polls in slices of at most 100 ms so that an abort flag set by another
// thread is noticed quickly. Timeouts and aborts return ncclSystemError with a WARN
// naming what was awaited; a peer that closed its connection gives ncclRemoteError.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl.h"

namespace chorus {

// An IPv4 or IPv6 socket address (family AF_UNSPEC when empty).
struct SocketAddress {
  sockaddr_storage storage{};

  int family() const { return storage.ss_family; }
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  uint16_t port() const;
  void setPort(uint16_t port);
  socklen_t length() const;
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  // "1.2.3.4:5" or "[fe80::1%eth0]:5".
  std::string toString() const;
  // Without the port: "1.2.3.4" or "fe80::1%eth0".
  std::string hostToString() const;
  // Copies a sockaddr_in / sockaddr_in6; false (and left empty) for other families or short lengths.
  bool assign(const sockaddr* address, socklen_t length);
};

// When a wait gives up: a point in time and an optional abort flag.
class Deadline {
 public:
  // `revokeFlag` (optional) ends the wait when it changes while the wait goes on: a
  // communicator revoked then keeps a usable bootstrap for its shrink, yet a wait that was
  // under way when it was revoked (a connection to a dead peer) stops.
  Deadline(int timeoutSeconds, const std::atomic<uint32_t>* abortFlag,
           const std::atomic<uint32_t>* revokeFlag = nullptr);
  // The setting the timeout came from, for the WARN (CHORUS_BOOTSTRAP_TIMEOUT unless told).
  Deadline& fromSetting(const char* setting) {
    setting_ = setting;
    return *this;
  }

  bool aborted() const { return abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire) != 0; }
  bool revoked() const {
    return revokeFlag_ != nullptr && revokeFlag_->load(std::memory_order_acquire) != revokeAtStart_;
  }
  bool expired() const { return std::chrono::steady_clock::now() >= end_; }
  // ncclSuccess while the wait may go on; otherwise WARNs "aborted while waiting for <what>"
  // or "timed out after N s waiting for <what>" and returns ncclSystemError.
  ncclResult_t check(const std::string& what) const;
  // Milliseconds for the next poll: at most 100, so the abort flag is seen promptly.
  int pollSliceMs() const;

 private:
  std::chrono::steady_clock::time_point end_;
  int timeoutSeconds_;
  const char* setting_ = "CHORUS_BOOTSTRAP_TIMEOUT";
  const std::atomic<uint32_t>* abortFlag_;
  const std::atomic<uint32_t>* revokeFlag_;
  uint32_t revokeAtStart_;
};

// Whether accept() failed for want of descriptors or memory (transient: see tryAccept).
bool acceptOutOfDescriptors(int err);
// Whether accept() failed because the connection it would have returned died first
// (ECONNABORTED, or a network error pending on it, which Linux reports from accept(): its
// man page says to retry on those); the listener itself is fine.
bool acceptedConnectionFailed(int err);
// One WARN per 10 s for the process: accept() on `where` ran out of descriptors; `shed`
// connections not yet proved were closed to make room.
void warnOutOfDescriptors(const std::string& where, size_t shed);

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT), bounded by `deadline`.
ncclResult_t waitForFd(int fd, short events, const Deadline& deadline, const std::string& what);

class Socket {
 public:
  Socket() = default;
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Listening socket: the bound address (real port). Connected socket: the peer's address.
  const SocketAddress& address() const { return address_; }
  void close();

  // Binds and listens on `address`; port 0 picks an ephemeral port. With `inUse`, an address
  // another socket still listens on is not WARNed: *inUse says so, for the caller to retry.
  static ncclResult_t listen(const SocketAddress& address, Socket* out, bool* inUse = nullptr);
  // Connects to `address`, retrying while the connection is refused (the listener may
  // not be up yet) until `deadline`. TCP_NODELAY is set. With `gone` (for a listener known
  // to have been up, which nothing reopens once closed), refusals for kGoneAfterSeconds
  // mean it is gone for good: *gone is set and the result is ncclRemoteError, for the
  // caller to WARN with what that listener was.
  static constexpr int kGoneAfterSeconds = 5;
  static ncclResult_t connect(const SocketAddress& address, const Deadline& deadline, Socket* out,
                              bool* gone = nullptr);

  // Accepts one queued connection if there is one; `*out` stays invalid otherwise. Running
  // out of descriptors or kernel memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) is no failure of
  // the listener: `*outOfDescriptors` (when given) says so, and the caller sheds connections
  // that have not proved themselves yet.
  ncclResult_t tryAccept(Socket* out, bool* outOfDescriptors = nullptr);
  // Waits for a connection and accepts it.
  ncclResult_t accept(const Deadline& deadline, Socket* out);

  // Transfers exactly `size` bytes, waiting as needed.
  ncclResult_t sendAll(const void* data, size_t size, const Deadline& deadline);
  ncclResult_t recvAll(void* data, size_t size, const Deadline& deadline);
  // Transfers what the kernel accepts / holds right now, without waiting. `*closed` is
  // set when the peer has closed (or reset) the connection: no error is logged for it.
  ncclResult_t trySend(const void* data, size_t size, size_t* sent);
  ncclResult_t tryRecv(void* data, size_t size, size_t* received, bool* closed);

 private:
  Socket(int fd, const SocketAddress& address) : fd_(fd), address_(address) {}

  int fd_ = -1;
  SocketAddress address_;
};

}  // namespace chorus
