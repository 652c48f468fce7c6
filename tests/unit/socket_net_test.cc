// The socket net over loopback: connection setup, exact bytes for many sizes and socket
// counts, request pools, dead and misbehaving peers, bad arguments, and cleanup.
#include "net/socket_net.h"

#include <gtest/gtest.h>

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

#include "bootstrap/interfaces.h"
#include "bootstrap/socket.h"

namespace chorus {
namespace {

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

int openFdCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// A byte pattern that differs at every offset of a message and between messages.
std::vector<char> pattern(size_t size, uint32_t seed) {
  std::vector<char> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed * 40503u;
    bytes[i] = static_cast<char>(x ^ (x >> 15));
  }
  return bytes;
}

SocketAddress handleAddress(const Handle& handle) {
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

// Listens, then calls connect and accept alternately from this thread until both give a comm.
void connectPair(Net& net, Connection* c) {
  ASSERT_EQ(net.listen(0, c->handle.data(), &c->listen), ncclSuccess);
  ASSERT_NE(c->listen, nullptr);
  Handle peerHandle = c->handle;  // what the sender gets out of band
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while ((c->send == nullptr || c->recv == nullptr) && Clock::now() < deadline) {
    if (c->send == nullptr) {
      ASSERT_EQ(net.connect(0, peerHandle.data(), &c->send), ncclSuccess);
    }
    if (c->recv == nullptr) {
      ASSERT_EQ(net.accept(c->listen, &c->recv), ncclSuccess);
    }
  }
  ASSERT_NE(c->send, nullptr) << "connect() gave no comm within 5 s";
  ASSERT_NE(c->recv, nullptr) << "accept() gave no comm within 5 s";
}

// Drives test() on the given requests until all are done; their sizes land in `sizes`.
void waitAll(Net& net, std::vector<NetRequest*> requests, std::vector<int>* sizes) {
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
void transfer(Net& net, const Connection& c, size_t size, size_t capacity, uint32_t seed) {
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

TEST_F(SocketNetTest, LoopbackIsTheOnlyDeviceWithIfnameLo) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  int count = 0;
  ASSERT_EQ(net.devices(&count), ncclSuccess);
  ASSERT_EQ(count, 1);
  NetProperties props;
  ASSERT_EQ(net.getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.name, "lo");
  EXPECT_EQ(props.ptrSupport, kNetPtrHost);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_GT(props.speed, 0);
  EXPECT_GT(props.maxComms, 0);
  EXPECT_EQ(net.getProperties(1, &props), ncclInvalidArgument);
  EXPECT_EQ(net.getProperties(-1, &props), ncclInvalidArgument);
  EXPECT_EQ(net.dataSocketsPerConnection(), 1);
}

TEST_F(SocketNetTest, NoMatchingInterfaceFailsInitAndCallsBeforeInitFail) {
  ScopedEnv ifname("NCCL_SOCKET_IFNAME", "=no_such_interface0");
  SocketNet net;
  Handle handle{};
  NetListenComm* listen = nullptr;
  EXPECT_EQ(net.listen(0, handle.data(), &listen), ncclInternalError);
  EXPECT_EQ(net.init(), ncclSystemError);
  EXPECT_EQ(listen, nullptr);
}

TEST_F(SocketNetTest, MessagesOfManySizesArriveExactly) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  uint32_t seed = 1;
  for (size_t size : {size_t(0), size_t(1), size_t(4096), size_t(1 << 20) + 3, size_t(64) << 20}) {
    SCOPED_TRACE(size);
    ASSERT_NO_FATAL_FAILURE(transfer(net, c, size, size, seed++));
  }
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net.closeListen(c.listen), ncclSuccess);
}

TEST_F(SocketNetTest, OutstandingRequestsCompleteInPostingOrder) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const std::vector<size_t> sizes = {300000, 0, 7, 65536, 1 << 20, 12345};
  const int capacity = 1 << 20;
  std::vector<std::vector<char>> out, in;
  std::vector<NetRequest*> sends, recvs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], static_cast<uint32_t>(100 + i)));
    NetRequest* request = nullptr;
    ASSERT_EQ(net.isend(c.send, out.back().data(), static_cast<int>(sizes[i]), 0, nullptr, &request), ncclSuccess);
    ASSERT_NE(request, nullptr);
    sends.push_back(request);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.emplace_back(capacity, 'Z');
    void* data = in.back().data();
    int size = capacity;
    NetRequest* request = nullptr;
    ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &request), ncclSuccess);
    ASSERT_NE(request, nullptr);
    recvs.push_back(request);
  }
  std::vector<NetRequest*> all = recvs;
  all.insert(all.end(), sends.begin(), sends.end());
  std::vector<int> received;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, all, &received));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(received[i], static_cast<int>(sizes[i])) << "message " << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << "message " << i;
  }
}

TEST_F(SocketNetTest, FullRequestPoolGivesNullRequestUntilOneIsDone) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  char sendByte = 'x';
  std::vector<char> recvBytes(SocketNet::kMaxRequests + 1);
  std::vector<NetRequest*> sends, recvs;
  for (int i = 0; i <= SocketNet::kMaxRequests; ++i) {
    NetRequest* send = nullptr;
    NetRequest* recv = nullptr;
    void* data = &recvBytes[i];
    int size = 1;
    ASSERT_EQ(net.isend(c.send, &sendByte, 1, 0, nullptr, &send), ncclSuccess);
    ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &recv), ncclSuccess);
    if (i < SocketNet::kMaxRequests) {
      ASSERT_NE(send, nullptr) << i;
      ASSERT_NE(recv, nullptr) << i;
      sends.push_back(send);
      recvs.push_back(recv);
    } else {
      EXPECT_EQ(send, nullptr) << "isend beyond the pool gave a request";
      EXPECT_EQ(recv, nullptr) << "irecv beyond the pool gave a request";
    }
  }
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, {sends[0], recvs[0]}, &sizes));
  NetRequest* send = nullptr;
  EXPECT_EQ(net.isend(c.send, &sendByte, 1, 0, nullptr, &send), ncclSuccess);
  EXPECT_NE(send, nullptr) << "a done request did not go back to the pool";
  NetRequest* released = recvs[0];
  std::vector<NetRequest*> rest(sends.begin() + 1, sends.end());
  rest.insert(rest.end(), recvs.begin() + 1, recvs.end());
  ASSERT_NO_FATAL_FAILURE(waitAll(net, rest, &sizes));
  EXPECT_TRUE(std::all_of(recvBytes.begin(), recvBytes.end() - 1, [](char b) { return b == 'x'; }));
  int done = 0;
  EXPECT_EQ(net.test(released, &done, nullptr), ncclInvalidArgument) << "a released request tested again";
}

TEST_F(SocketNetTest, LargerReceiveCompletesWithTheSentSize) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, 1000, 1 << 20, 7));
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, 70000, 70000, 8));  // the stream is still aligned
}

TEST_F(SocketNetTest, FourDataSocketsCarryTheSameBytes) {
  ScopedEnv socks("NCCL_NSOCKS_PERTHREAD", "4");
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  ASSERT_EQ(net.dataSocketsPerConnection(), 4);
  int fdsBefore = openFdCount();
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  wire::Handle h;
  memcpy(&h, c.handle.data(), sizeof(h));
  EXPECT_EQ(h.dataSockets, 4u);
  EXPECT_EQ(openFdCount() - fdsBefore, 1 + 2 * (4 + 1)) << "listener + control and 4 data sockets per side";
  uint32_t seed = 20;
  for (size_t size : {size_t(1), size_t(65537), size_t(1 << 20) + 3, size_t(8 << 20) + 5}) {
    SCOPED_TRACE(size);
    ASSERT_NO_FATAL_FAILURE(transfer(net, c, size, size + 11, seed++));
  }
}

TEST_F(SocketNetTest, ChunkRangesCoverTheMessageOnce) {
  for (uint32_t sockets : {1u, 3u, 4u, 64u}) {
    for (size_t size : {size_t(0), size_t(1), wire::kMinChunkBytes + 1, size_t(1 << 20) + 3}) {
      size_t next = 0;
      for (uint32_t s = 0; s < sockets; ++s) {
        wire::ChunkRange r = wire::chunkRange(size, s, sockets);
        EXPECT_EQ(r.begin, next) << sockets << " sockets, " << size << " bytes";
        EXPECT_TRUE(r.end == r.begin || r.end - r.begin >= wire::kMinChunkBytes || r.end == size);
        next = r.end;
      }
      EXPECT_EQ(next, size);
    }
  }
}

TEST_F(SocketNetTest, BadSocketCountsAreClamped) {
  struct Case {
    const char* threads;
    const char* socks;
    int expected;
  };
  for (const Case& test : {Case{"1", "0", 1}, Case{"1", "100", 64}, Case{"4", "32", 64}, Case{"99", "1", 16},
                           Case{"2", "3", 6}, Case{"1", "notanumber", 1}}) {
    ScopedEnv threads("NCCL_SOCKET_NTHREADS", test.threads);
    ScopedEnv socks("NCCL_NSOCKS_PERTHREAD", test.socks);
    SocketNet net;
    ASSERT_EQ(net.init(), ncclSuccess);
    EXPECT_EQ(net.dataSocketsPerConnection(), test.expected) << test.threads << " x " << test.socks;
  }
}

TEST_F(SocketNetTest, Ipv6Loopback) {
  if (listInterfaces("=lo", AF_INET6).empty()) GTEST_SKIP() << "lo has no IPv6 address (::1) here";
  ScopedEnv family("NCCL_SOCKET_FAMILY", "AF_INET6");
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  EXPECT_EQ(handleAddress(c.handle).family(), AF_INET6);
  EXPECT_EQ(handleAddress(c.handle).hostToString(), "::1");
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, (1 << 20) + 3, (1 << 20) + 3, 30));
}

// Posts a 64 MiB message both ways and moves part of it, so that it is mid-flight.
void startLargeMessage(Net& net, const Connection& c, std::vector<char>* out, std::vector<char>* in, NetRequest** send,
                       NetRequest** recv) {
  out->assign(64 << 20, 'a');
  in->assign(64 << 20, 0);
  ASSERT_EQ(net.isend(c.send, out->data(), static_cast<int>(out->size()), 0, nullptr, send), ncclSuccess);
  void* data = in->data();
  int size = static_cast<int>(in->size());
  ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, recv), ncclSuccess);
  int done = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(net.test(*send, &done, nullptr), ncclSuccess);
    ASSERT_EQ(done, 0);
    ASSERT_EQ(net.test(*recv, &done, nullptr), ncclSuccess);
    ASSERT_EQ(done, 0);
  }
}

// Tests `request` until it fails; returns the error, or ncclSuccess if none came in 5 s.
ncclResult_t errorWithin5s(Net& net, NetRequest* request) {
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    int done = 0;
    ncclResult_t result = net.test(request, &done, nullptr);
    if (result != ncclSuccess) return result;
    if (done) return ncclSuccess;
  }
  return ncclSuccess;
}

TEST_F(SocketNetTest, SenderClosingMidMessageFailsTheReceive) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  std::vector<char> out, in;
  NetRequest *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(startLargeMessage(net, c, &out, &in, &send, &recv));
  ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
  auto start = Clock::now();
  EXPECT_EQ(errorWithin5s(net, recv), ncclRemoteError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  int done = 0;
  EXPECT_EQ(net.test(recv, &done, nullptr), ncclRemoteError) << "the error must stick to the comm";
  NetRequest* again = nullptr;
  void* data = in.data();
  int size = 1;
  EXPECT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &again), ncclRemoteError);
}

TEST_F(SocketNetTest, ReceiverClosingMidMessageFailsTheSend) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  std::vector<char> out, in;
  NetRequest *send = nullptr, *recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(startLargeMessage(net, c, &out, &in, &send, &recv));
  ASSERT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(errorWithin5s(net, send), ncclRemoteError);
}

TEST_F(SocketNetTest, ConnectingToAClosedListenerFails) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Handle handle{};
  NetListenComm* listen = nullptr;
  ASSERT_EQ(net.listen(0, handle.data(), &listen), ncclSuccess);
  ASSERT_EQ(net.closeListen(listen), ncclSuccess);
  NetSendComm* send = nullptr;
  ncclResult_t result = ncclSuccess;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); result == ncclSuccess && Clock::now() < deadline;) {
    result = net.connect(0, handle.data(), &send);
    ASSERT_EQ(send, nullptr);
  }
  EXPECT_EQ(result, ncclSystemError);
}

// A raw TCP client of `handle`'s listener.
Socket rawClient(const Handle& handle) {
  Socket socket;
  EXPECT_EQ(Socket::connect(handleAddress(handle), Deadline(5, nullptr), &socket), ncclSuccess);
  return socket;
}

void sendRaw(Socket& socket, const void* data, size_t size) {
  EXPECT_EQ(socket.sendAll(data, size, Deadline(5, nullptr)), ncclSuccess);
}

TEST_F(SocketNetTest, MalformedHellosAreDroppedAndAGoodConnectionStillWorks) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_EQ(net.listen(0, c.handle.data(), &c.listen), ncclSuccess);
  std::mt19937 random(42);
  std::vector<char> noise(100);
  for (char& b : noise) b = static_cast<char>(random());
  Socket garbage = rawClient(c.handle);
  sendRaw(garbage, noise.data(), noise.size());
  wire::Hello hello{wire::kHelloMagic, 99, 0, 1};
  Socket truncated = rawClient(c.handle);
  sendRaw(truncated, &hello, 10);
  truncated.close();
  Socket silent = rawClient(c.handle);  // connects, says nothing, stays open
  sendRaw(silent, &hello, 5);
  wire::Hello huge{wire::kHelloMagic, 100, 0, 1u << 31};
  Socket hugeCount = rawClient(c.handle);
  sendRaw(hugeCount, &huge, sizeof(huge));
  // Two sockets past the last index: were they counted, connection 101 would be complete.
  wire::Hello badIndex[2] = {{wire::kHelloMagic, 101, 7, 1}, {wire::kHelloMagic, 101, 2, 1}};
  Socket outOfRange[2] = {rawClient(c.handle), rawClient(c.handle)};
  sendRaw(outOfRange[0], &badIndex[0], sizeof(wire::Hello));
  sendRaw(outOfRange[1], &badIndex[1], sizeof(wire::Hello));
  for (int i = 0; i < 10; ++i) {  // the listener meets all of them before the good connection
    NetRecvComm* recv = nullptr;
    ASSERT_EQ(net.accept(c.listen, &recv), ncclSuccess);
    ASSERT_EQ(recv, nullptr) << "a malformed connection was accepted";
  }
  Handle peerHandle = c.handle;
  for (auto deadline = Clock::now() + std::chrono::seconds(5);
       (c.send == nullptr || c.recv == nullptr) && Clock::now() < deadline;) {
    if (c.send == nullptr) {
      ASSERT_EQ(net.connect(0, peerHandle.data(), &c.send), ncclSuccess);
    }
    if (c.recv == nullptr) {
      ASSERT_EQ(net.accept(c.listen, &c.recv), ncclSuccess);
    }
  }
  ASSERT_NE(c.send, nullptr);
  ASSERT_NE(c.recv, nullptr);
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, (1 << 20) + 3, (1 << 20) + 3, 50));
}

// A peer that speaks the hello correctly, then a bad message header, fails only the
// receive of its own comm; a good connection on the same listener keeps working.
TEST_F(SocketNetTest, ForgedPeerWithBadHeaderFailsItsReceiveOnly) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection good;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &good));
  struct Case {
    const char* what;
    wire::Header header;
    size_t bytes;
  };
  const Case cases[] = {
      {"huge length", {wire::kHeaderMagic, 0, uint64_t(1) << 40}, sizeof(wire::Header)},
      {"longer than the receive", {wire::kHeaderMagic, 0, 4097}, sizeof(wire::Header)},
      {"bad magic", {0xdeadbeef, 0, 16}, sizeof(wire::Header)},
      {"truncated header", {wire::kHeaderMagic, 0, 16}, 7},
  };
  uint64_t connectionId = 0x5eed;
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    Socket control = rawClient(good.handle);
    Socket data = rawClient(good.handle);
    wire::Hello hellos[2] = {{wire::kHelloMagic, connectionId, 0, 1}, {wire::kHelloMagic, connectionId, 1, 1}};
    ++connectionId;
    sendRaw(control, &hellos[0], sizeof(wire::Hello));
    sendRaw(data, &hellos[1], sizeof(wire::Hello));
    NetRecvComm* forged = nullptr;
    for (auto deadline = Clock::now() + std::chrono::seconds(5); forged == nullptr && Clock::now() < deadline;) {
      ASSERT_EQ(net.accept(good.listen, &forged), ncclSuccess);
    }
    ASSERT_NE(forged, nullptr);
    sendRaw(control, &test.header, test.bytes);
    if (test.bytes < sizeof(wire::Header)) control.close();
    std::vector<char> buffer(4096);
    void* bufferData = buffer.data();
    int size = static_cast<int>(buffer.size());
    NetRequest* request = nullptr;
    ASSERT_EQ(net.irecv(forged, 1, &bufferData, &size, nullptr, nullptr, &request), ncclSuccess);
    EXPECT_EQ(errorWithin5s(net, request), ncclRemoteError);
    EXPECT_EQ(net.closeRecv(forged), ncclSuccess);
    ASSERT_NO_FATAL_FAILURE(transfer(net, good, 100000, 100000, 60));
  }
}

TEST_F(SocketNetTest, BadArgumentsAreRejected) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  Handle handle{};
  NetListenComm* listen = nullptr;
  NetSendComm* send = nullptr;
  NetRecvComm* recv = nullptr;
  NetRequest* request = nullptr;
  NetMemHandle* mhandle = nullptr;
  char buffer[16] = {};
  void* data = buffer;
  int size = 16;
  int done = 0;
  EXPECT_EQ(net.devices(nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.getProperties(0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.listen(0, nullptr, &listen), ncclInvalidArgument);
  EXPECT_EQ(net.listen(0, handle.data(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.listen(1, handle.data(), &listen), ncclInvalidArgument);
  EXPECT_EQ(net.listen(-1, handle.data(), &listen), ncclInvalidArgument);
  EXPECT_EQ(net.connect(0, nullptr, &send), ncclInvalidArgument);
  EXPECT_EQ(net.connect(0, handle.data(), &send), ncclInvalidArgument) << "an all-zero handle";
  Handle unknownProgress = c.handle;
  unknownProgress[offsetof(wire::Handle, connectId)] = 77;
  EXPECT_EQ(net.connect(0, unknownProgress.data(), &send), ncclInvalidArgument);
  EXPECT_EQ(net.connect(3, c.handle.data(), &send), ncclInvalidArgument);
  EXPECT_EQ(send, nullptr);
  EXPECT_EQ(net.accept(nullptr, &recv), ncclInvalidArgument);
  EXPECT_EQ(net.accept(c.listen, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.accept(reinterpret_cast<NetListenComm*>(buffer), &recv), ncclInvalidArgument);
  EXPECT_EQ(net.isend(nullptr, buffer, 1, 0, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.isend(c.send, buffer, -1, 0, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.isend(c.send, nullptr, 1, 0, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.isend(c.send, buffer, 1, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.isend(reinterpret_cast<NetSendComm*>(c.recv), buffer, 1, 0, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.irecv(nullptr, 1, &data, &size, nullptr, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.irecv(c.recv, 2, &data, &size, nullptr, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, nullptr), ncclInvalidArgument);
  int negative = -5;
  EXPECT_EQ(net.irecv(c.recv, 1, &data, &negative, nullptr, nullptr, &request), ncclInvalidArgument);
  EXPECT_EQ(net.irecv(reinterpret_cast<NetRecvComm*>(c.send), 1, &data, &size, nullptr, nullptr, &request),
            ncclInvalidArgument);
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(net.test(nullptr, &done, nullptr), ncclInvalidArgument);
  ASSERT_EQ(net.isend(c.send, buffer, 1, 0, nullptr, &request), ncclSuccess);
  EXPECT_EQ(net.test(request, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.regMr(nullptr, buffer, 16, kNetPtrHost, &mhandle), ncclInvalidArgument);
  EXPECT_EQ(net.regMr(c.send, buffer, 16, kNetPtrCuda, &mhandle), ncclInvalidArgument);
  EXPECT_EQ(net.regMr(buffer, buffer, 16, kNetPtrHost, &mhandle), ncclInvalidArgument) << "not a comm";
  ASSERT_EQ(net.regMr(c.send, buffer, 16, kNetPtrHost, &mhandle), ncclSuccess);
  EXPECT_NE(mhandle, nullptr);
  EXPECT_EQ(net.deregMr(c.send, reinterpret_cast<NetMemHandle*>(buffer)), ncclInvalidArgument);
  EXPECT_EQ(net.deregMr(c.send, mhandle), ncclSuccess);
  NetRequest* flush = reinterpret_cast<NetRequest*>(buffer);
  EXPECT_EQ(net.iflush(c.recv, 1, &data, &size, nullptr, &flush), ncclSuccess);
  EXPECT_EQ(flush, nullptr) << "host memory needs no flush";
  EXPECT_EQ(net.closeSend(nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.closeRecv(nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.closeListen(nullptr), ncclInvalidArgument);
  EXPECT_EQ(net.closeSend(reinterpret_cast<NetSendComm*>(c.recv)), ncclInvalidArgument);
  EXPECT_EQ(net.closeRecv(reinterpret_cast<NetRecvComm*>(c.send)), ncclInvalidArgument);
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net.closeSend(c.send), ncclInvalidArgument) << "closed twice";
}

TEST_F(SocketNetTest, ClosingOrDestroyingReleasesEverySocket) {
  ScopedEnv socks("NCCL_NSOCKS_PERTHREAD", "2");
  int baseline = openFdCount();
  {
    SocketNet net;
    ASSERT_EQ(net.init(), ncclSuccess);
    Connection c;
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
    ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
    ASSERT_EQ(net.closeRecv(c.recv), ncclSuccess);
    ASSERT_EQ(net.closeListen(c.listen), ncclSuccess);
    EXPECT_EQ(openFdCount(), baseline) << "after closeSend, closeRecv, closeListen";
    // Left open on purpose: a connected pair with requests in flight, a half-made
    // connection and a listener with an unannounced client.
    Connection open;
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &open));
    std::vector<char> bytes(1 << 20);
    NetRequest* request = nullptr;
    ASSERT_EQ(net.isend(open.send, bytes.data(), static_cast<int>(bytes.size()), 0, nullptr, &request), ncclSuccess);
    Handle handle{};
    NetListenComm* listen = nullptr;
    ASSERT_EQ(net.listen(0, handle.data(), &listen), ncclSuccess);
    NetSendComm* send = nullptr;
    ASSERT_EQ(net.connect(0, handle.data(), &send), ncclSuccess);
    EXPECT_GT(openFdCount(), baseline);
  }
  EXPECT_EQ(openFdCount(), baseline) << "after destroying the net";
}

}  // namespace
}  // namespace chorus
