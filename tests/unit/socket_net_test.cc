// The socket net over loopback: devices, connection setup, exact bytes for many sizes and
// socket counts, request pools and ordering, IPv6. Failures: socket_net_failure_test.cc.
#include <gtest/gtest.h>

#include "socket_net_fixture.h"

namespace chorus {
namespace {

using namespace socket_net_test;

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

// The receiver reads its control stream ahead (SocketComm::recvControl): small messages
// that arrived together land in one read, one receive at a time takes them in order with
// their sizes, and while the next header waits in the read-ahead (not in the socket) the
// comm does not offer its socket for a sleep (waitSet says it cannot say), so a proxy
// asleep on it could not miss it.
TEST_F(SocketNetTest, SmallMessagesReadAheadArriveInOrderOneReceiveAtATime) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const std::vector<size_t> sizes = {8, 0, 72, 4096, 1, 3000, 64};
  std::vector<std::vector<char>> out;
  std::vector<NetRequest*> sends;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], static_cast<uint32_t>(31 + i)));
    NetRequest* request = nullptr;
    ASSERT_EQ(net.isend(c.send, out.back().data(), static_cast<int>(sizes[i]), 0, nullptr, &request), ncclSuccess);
    sends.push_back(request);
  }
  std::vector<int> sent;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, sends, &sent));
  usleep(20000);  // every message is in the receiver's socket before its first read
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<char> in(8192, 'Z');
    void* data = in.data();
    int size = static_cast<int>(in.size());
    NetRequest* request = nullptr;
    ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &request), ncclSuccess);
    if (i > 0) {
      std::vector<pollfd> fds;
      EXPECT_FALSE(net.waitSet(c.recv, &fds)) << "message " << i << "'s header is read ahead, not in the socket";
    }
    std::vector<int> done;
    ASSERT_NO_FATAL_FAILURE(waitAll(net, {request}, &done));
    EXPECT_EQ(done[0], static_cast<int>(sizes[i])) << "message " << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in.begin())) << "message " << i;
    EXPECT_EQ(in[sizes[i]], 'Z') << "message " << i << " wrote past its size";
  }
  // Nothing is left ahead: with a receive posted, the comm waits on its socket again.
  std::vector<char> in(64);
  void* data = in.data();
  int size = 64;
  NetRequest* request = nullptr;
  ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &request), ncclSuccess);
  int flag = 0;
  ASSERT_EQ(net.test(request, &flag, nullptr), ncclSuccess);
  EXPECT_EQ(flag, 0);
  std::vector<pollfd> fds;
  EXPECT_TRUE(net.waitSet(c.recv, &fds));
  EXPECT_EQ(fds.size(), 1u) << "the control socket, for the next header";
  const std::vector<char> last = pattern(40, 77);
  NetRequest* send = nullptr;
  ASSERT_EQ(net.isend(c.send, const_cast<char*>(last.data()), 40, 0, nullptr, &send), ncclSuccess);
  std::vector<int> done;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, {send, request}, &done));
  EXPECT_EQ(done[1], 40);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), in.begin()));
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
}

// Notes (Net::sendNote): the sender's travels behind the messages posted before it and
// says how many there were; the receiver's travels back; the newest wins; messages around
// them arrive intact.
TEST_F(SocketNetTest, NotesTravelBothWaysBehindTheMessagesPostedBeforeThem) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  ASSERT_TRUE(net.supportsNotes());
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  auto note = [](char fill) { return std::vector<char>(kNetNoteBytes, fill); };
  const std::vector<size_t> sizes = {1 << 20, 7, 300000, 12};  // large ones go on the data socket
  std::vector<std::vector<char>> out, in;
  std::vector<NetRequest*> requests;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i == 3) {
      ASSERT_EQ(net.sendNote(c.send, note('A').data()), ncclSuccess);  // behind three messages
    }
    out.push_back(pattern(sizes[i], static_cast<uint32_t>(7 + i)));
    NetRequest* request = nullptr;
    ASSERT_EQ(net.isend(c.send, out.back().data(), static_cast<int>(sizes[i]), 0, nullptr, &request), ncclSuccess);
    requests.push_back(request);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.emplace_back(1 << 20, 'Z');
    void* data = in.back().data();
    int size = 1 << 20;
    NetRequest* request = nullptr;
    ASSERT_EQ(net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &request), ncclSuccess);
    requests.push_back(request);
  }
  std::vector<int> done;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, requests, &done));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(done[sizes.size() + i], static_cast<int>(sizes[i])) << "message " << i;
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << "message " << i;
  }
  std::vector<char> got(kNetNoteBytes);
  uint64_t after = 99;
  bool fresh = false;
  ASSERT_EQ(net.takeNote(c.recv, got.data(), &after, &fresh), ncclSuccess);
  ASSERT_TRUE(fresh) << "the sender's note did not arrive with the messages";
  EXPECT_EQ(got, note('A'));
  EXPECT_EQ(after, 3u) << "the note was sent behind three messages";
  ASSERT_EQ(net.takeNote(c.recv, got.data(), &after, &fresh), ncclSuccess);
  EXPECT_FALSE(fresh) << "a note is taken once";

  // Back from the receiver: two notes, the newest is what the sender ends up with.
  ASSERT_EQ(net.sendNote(c.recv, note('B').data()), ncclSuccess);
  ASSERT_EQ(net.sendNote(c.recv, note('C').data()), ncclSuccess);
  std::vector<char> last;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); last != note('C') && Clock::now() < deadline;) {
    ASSERT_EQ(net.takeNote(c.send, got.data(), &after, &fresh), ncclSuccess);
    if (fresh) {
      last = got;
      EXPECT_EQ(after, 0u);
    }
  }
  EXPECT_EQ(last, note('C')) << "the receiver's newest note did not reach the sender within 5 s";
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, 100000, 100000, 21));  // the stream is intact after notes both ways
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net.closeListen(c.listen), ncclSuccess);
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
  // Inline behind the header up to kInlineBytes, on the data sockets from one byte more.
  for (size_t size :
       {size_t(1), wire::kInlineBytes, wire::kInlineBytes + 1, size_t(1 << 20) + 3, size_t(8 << 20) + 5}) {
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

}  // namespace
}  // namespace chorus
