// Shared by the socket net tests: loopback setup, byte patterns, request helpers and the
// fixture that pins the socket settings for each test.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/interfaces.h"
#include "core/socket.h"
#include "tests/harness/socket_count.h"
#include "transport/net/socket_net.h"

namespace chorus::socket_net_test {

namespace wire = socket_net_wire;
using Clock = std::chrono::steady_clock;
using Handle = std::array<char, kNetHandleSize>;

// Sets (or unsets, for nullptr) an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline int openFdCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

using chorus_test::socketsWithTrafficClass;  // tests/harness/socket_count.h

// A byte pattern that differs at every offset of a message and between messages.
inline std::vector<char> pattern(size_t size, uint32_t seed) {
  std::vector<char> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed * 40503u;
    bytes[i] = static_cast<char>(x ^ (x >> 15));
  }
  return bytes;
}

// The listener's key in `handle`: what a test playing a rank (or a forger) proves knowledge of.
inline SipKey handleKey(const Handle& handle) {
  wire::Handle h;
  memcpy(&h, handle.data(), sizeof(h));
  return wire::keyOf(h);
}

inline SocketAddress handleAddress(const Handle& handle) {
  wire::Handle h;
  memcpy(&h, handle.data(), sizeof(h));
  SocketAddress address;
  address.assign(reinterpret_cast<const sockaddr*>(h.address), h.addressLength);
  return address;
}

struct Connection {
  NetListenComm* listen = nullptr;
  NetSendComm* send = nullptr;
  NetRecvComm* recv = nullptr;
  Handle handle{};
};

// Listens, then calls connect (with `config`) and accept alternately from this thread until
// both give a comm.
inline void connectPair(Net& net, Connection* c, const NetCommConfig& config = {}) {
  ASSERT_EQ(net.listen(0, c->handle.data(), &c->listen), ncclSuccess);
  ASSERT_NE(c->listen, nullptr);
  Handle peerHandle = c->handle;  // what the sender gets out of band
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while ((c->send == nullptr || c->recv == nullptr) && Clock::now() < deadline) {
    if (c->send == nullptr) {
      ASSERT_EQ(net.connect(0, config, peerHandle.data(), &c->send), ncclSuccess);
    }
    if (c->recv == nullptr) {
      ASSERT_EQ(net.accept(c->listen, &c->recv), ncclSuccess);
    }
  }
  ASSERT_NE(c->send, nullptr) << "connect() gave no comm within 5 s";
  ASSERT_NE(c->recv, nullptr) << "accept() gave no comm within 5 s";
}

// Drives test() on the given requests until all are done; their sizes land in `sizes`.
inline void waitAll(Net& net, std::vector<NetRequest*> requests, std::vector<int>* sizes) {
  sizes->assign(requests.size(), -1);
  auto deadline = Clock::now() + std::chrono::seconds(20);
  size_t left = requests.size();
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = requests.size(); i-- > 0;) {  // newest first: completion must not depend on order
      if (requests[i] == nullptr) continue;
      int done = 0;
      ASSERT_EQ(net.test(requests[i], &done, &(*sizes)[i]), ncclSuccess);
      if (done) {
        requests[i] = nullptr;
        --left;
      }
    }
  }
  ASSERT_EQ(left, 0u) << "requests not done within 20 s";
}

// Sends `size` pattern bytes into a receive of `capacity` bytes and checks what arrives.
inline void transfer(Net& net, const Connection& c, size_t size, size_t capacity, uint32_t seed) {
  std::vector<char> out = pattern(size, seed);
  std::vector<char> in(capacity, 'Z');
  NetRequest* sendRequest = nullptr;
  NetRequest* recvRequest = nullptr;
  ASSERT_EQ(net.isend(c.send, out.data(), static_cast<int>(size), 0, nullptr, &sendRequest), ncclSuccess);
  void* data = in.data();
  int capacityInt = static_cast<int>(capacity);
  int tag = 0;
  ASSERT_EQ(net.irecv(c.recv, 1, &data, &capacityInt, &tag, nullptr, &recvRequest), ncclSuccess);
  ASSERT_NE(sendRequest, nullptr);
  ASSERT_NE(recvRequest, nullptr);
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, {sendRequest, recvRequest}, &sizes));
  EXPECT_EQ(sizes[1], static_cast<int>(size));
  ASSERT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << "payload of " << size << " bytes differs";
  EXPECT_TRUE(std::all_of(in.begin() + size, in.end(), [](char b) { return b == 'Z'; }))
      << "bytes past the message were written";
}

class SocketNetTest : public ::testing::Test {
 protected:
  ScopedEnv ifname_{"NCCL_SOCKET_IFNAME", "lo"};
  ScopedEnv family_{"NCCL_SOCKET_FAMILY", nullptr};
  ScopedEnv socks_{"NCCL_NSOCKS_PERTHREAD", nullptr};
  ScopedEnv threads_{"NCCL_SOCKET_NTHREADS", nullptr};
};

}  // namespace chorus::socket_net_test
