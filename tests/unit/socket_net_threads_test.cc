// The socket net with helper threads (NCCL_SOCKET_NTHREADS >= 2): exact bytes, ordering
// of messages in flight, failures seen by a helper, prompt close with a silent peer, and
// the number of threads really started and joined.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "socket_net_fixture.h"

namespace chorus {
namespace {

using namespace socket_net_test;
using std::chrono::milliseconds;

// Bounds a loaded machine keeps (ctest -j2 on 2 cores can deschedule a thread for a long
// while): a close that blocked on the silent peer, or a failure never noticed, takes
// forever, not seconds; the helpers look at their stop flags every 20 ms.
constexpr auto kCloseBound = std::chrono::seconds(2);
constexpr auto kFailBound = std::chrono::seconds(5);

int threadCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

// A joined thread leaves /proc/self/task a moment after join() returns: wait up to 1 s.
int threadCountSettlingAt(int expected) {
  int count = threadCount();
  for (auto deadline = Clock::now() + std::chrono::seconds(1); count != expected && Clock::now() < deadline;) {
    std::this_thread::sleep_for(milliseconds(1));
    count = threadCount();
  }
  return count;
}

// Pins NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD for one net created after it.
struct ThreadSettings {
  ThreadSettings(int threads, int socks)
      : threadsEnv("NCCL_SOCKET_NTHREADS", std::to_string(threads).c_str()),
        socksEnv("NCCL_NSOCKS_PERTHREAD", std::to_string(socks).c_str()) {}
  ScopedEnv threadsEnv;
  ScopedEnv socksEnv;
};

// Tests `request` until it fails; returns the error, or ncclSuccess if it completed or
// nothing came within `limit`.
ncclResult_t errorWithin(Net& net, NetRequest* request, Clock::duration limit) {
  for (auto deadline = Clock::now() + limit; Clock::now() < deadline;) {
    int done = 0;
    ncclResult_t result = net.test(request, &done, nullptr);
    if (result != ncclSuccess) return result;
    if (done) return ncclSuccess;
  }
  return ncclSuccess;
}

// Pages never touched stay unbacked: large buffers for messages that never complete.
std::unique_ptr<char[]> untouched(size_t size) { return std::make_unique_for_overwrite<char[]>(size); }

NetRequest* postRecv(Net& net, NetRecvComm* comm, char* data, size_t capacity) {
  void* buffer = data;
  int size = static_cast<int>(capacity);
  NetRequest* request = nullptr;
  EXPECT_EQ(net.irecv(comm, 1, &buffer, &size, nullptr, nullptr, &request), ncclSuccess);
  EXPECT_NE(request, nullptr);
  return request;
}

NetRequest* postSend(Net& net, NetSendComm* comm, const char* data, size_t size) {
  NetRequest* request = nullptr;
  EXPECT_EQ(net.isend(comm, const_cast<char*>(data), static_cast<int>(size), 0, nullptr, &request), ncclSuccess);
  EXPECT_NE(request, nullptr);
  return request;
}

TEST_F(SocketNetTest, ThreadsMoveMessagesOfManySizesExactly) {
  for (int threads : {2, 4}) {
    SCOPED_TRACE("NCCL_SOCKET_NTHREADS=" + std::to_string(threads));
    ThreadSettings settings(threads, 2);
    SocketNet net;
    ASSERT_EQ(net.init(), ncclSuccess);
    EXPECT_EQ(net.helperThreadsSetting(), threads);
    EXPECT_EQ(net.dataSocketsPerConnection(), threads * 2);
    Connection c;
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
    uint32_t seed = 1;
    for (size_t size : {size_t(0), size_t(1), size_t(64 << 10) - 1, size_t(1 << 20) + 3, size_t(64) << 20}) {
      SCOPED_TRACE(size);
      ASSERT_NO_FATAL_FAILURE(transfer(net, c, size, size, seed++));
    }
    // A receive larger than the message completes with the message's size.
    ASSERT_NO_FATAL_FAILURE(transfer(net, c, 1000, 1 << 20, seed++));
    ASSERT_NO_FATAL_FAILURE(transfer(net, c, (1 << 20) + 3, 8 << 20, seed++));
    EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
    EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
    EXPECT_EQ(net.closeListen(c.listen), ncclSuccess);
  }
}

TEST_F(SocketNetTest, ThreadsCompleteEightMessagesInFlightInOrder) {
  ThreadSettings settings(4, 2);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  static_assert(SocketNet::kMaxRequests == 8);
  const std::vector<size_t> sizes = {9 << 20, 0, 7, 65535, (1 << 20) + 3, 12345, 3 << 20, 1};
  const size_t capacity = 10 << 20;
  std::vector<std::vector<char>> out, in;
  std::vector<NetRequest*> sends, recvs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], static_cast<uint32_t>(200 + i)));
    sends.push_back(postSend(net, c.send, out.back().data(), sizes[i]));
    in.emplace_back(capacity, 'Z');
    recvs.push_back(postRecv(net, c.recv, in.back().data(), capacity));
  }
  // Only the last receive (1 byte, on the first data socket) is tested: once it is done,
  // every earlier message must have landed whole and report done without more progress.
  std::vector<int> received(sizes.size(), -1);
  int lastDone = 0;
  for (auto deadline = Clock::now() + std::chrono::seconds(20); !lastDone && Clock::now() < deadline;) {
    for (NetRequest*& send : sends) {
      int done = 0;
      if (send == nullptr) continue;
      ASSERT_EQ(net.test(send, &done, nullptr), ncclSuccess);
      if (done) send = nullptr;
    }
    ASSERT_EQ(net.test(recvs.back(), &lastDone, &received.back()), ncclSuccess);
  }
  ASSERT_EQ(lastDone, 1) << "the last receive was not done within 20 s";
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), in[i].begin())) << "message " << i << " incomplete";
    int done = 0;
    ASSERT_EQ(net.test(recvs[i], &done, &received[i]), ncclSuccess);
    EXPECT_EQ(done, 1) << "message " << i << " not done when a later one was";
  }
  sends.erase(std::remove(sends.begin(), sends.end(), nullptr), sends.end());
  std::vector<int> ignored;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, sends, &ignored));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(received[i], static_cast<int>(sizes[i])) << "message " << i;
    EXPECT_TRUE(std::all_of(in[i].begin() + sizes[i], in[i].end(), [](char b) { return b == 'Z'; })) << i;
  }
}

// The sender's helpers fill the sockets of a 256 MiB message (more than loopback buffers
// hold), then the sender closes: the receiver's helpers drain the buffered part and meet
// the end of the streams mid-range.
TEST_F(SocketNetTest, ThreadsFailTheReceiveWhenThePeerClosesMidMessage) {
  ThreadSettings settings(2, 1);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const size_t size = size_t(256) << 20;
  auto out = untouched(size);
  auto in = untouched(size);
  NetRequest* send = postSend(net, c.send, out.get(), size);
  int done = 0;
  ASSERT_EQ(net.test(send, &done, nullptr), ncclSuccess);  // sends the header
  std::this_thread::sleep_for(milliseconds(200));          // the helpers fill the buffers
  ASSERT_EQ(net.test(send, &done, nullptr), ncclSuccess);
  ASSERT_EQ(done, 0) << "256 MiB fit in the socket buffers without a reader";
  ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
  auto start = Clock::now();
  NetRequest* recv = postRecv(net, c.recv, in.get(), size);
  EXPECT_EQ(errorWithin(net, recv, kFailBound), ncclRemoteError);
  EXPECT_LT(Clock::now() - start, kFailBound);
  EXPECT_EQ(net.test(recv, &done, nullptr), ncclRemoteError) << "the error must stick to the comm";
}

// The receiver goes away with unread data: the sender's helpers, waiting in poll() for
// room, see the reset.
TEST_F(SocketNetTest, ThreadsFailTheSendWhenThePeerClosesMidMessage) {
  ThreadSettings settings(2, 1);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const size_t size = size_t(256) << 20;
  auto out = untouched(size);
  NetRequest* send = postSend(net, c.send, out.get(), size);
  int done = 0;
  ASSERT_EQ(net.test(send, &done, nullptr), ncclSuccess);
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(net.closeRecv(c.recv), ncclSuccess);
  auto start = Clock::now();
  EXPECT_EQ(errorWithin(net, send, kFailBound), ncclRemoteError);
  EXPECT_LT(Clock::now() - start, kFailBound);
}

// The peer's last message before it closed is delivered; the receive after it fails.
TEST_F(SocketNetTest, ThreadsDeliverTheLastMessageBeforeAClose) {
  ThreadSettings settings(2, 2);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  std::vector<char> out = pattern((1 << 20) + 3, 9);
  NetRequest* send = postSend(net, c.send, out.data(), out.size());
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, {send}, &sizes));  // on the wire, not yet received
  ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
  std::vector<char> in(2 << 20, 'Z');
  NetRequest* first = postRecv(net, c.recv, in.data(), in.size());
  NetRequest* second = postRecv(net, c.recv, in.data(), in.size());
  int done = 0;
  int size = -1;
  ncclResult_t result = ncclSuccess;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); !done && Clock::now() < deadline;) {
    result = net.test(first, &done, &size);
    if (result != ncclSuccess) break;
  }
  EXPECT_EQ(result, ncclSuccess);
  ASSERT_EQ(done, 1) << "the message sent before the close was lost";
  EXPECT_EQ(size, static_cast<int>(out.size()));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin()));
  EXPECT_EQ(errorWithin(net, second, std::chrono::seconds(1)), ncclRemoteError);
}

// A message complete before a helper failed on the next one is still reported done:
// the sender closes with all of A and part of B sent, so one helper may meet the close
// in B while the other is still reading its range of A; A must still complete.
TEST_F(SocketNetTest, ThreadsReportAMessageDoneBeforeALaterFailure) {
  ThreadSettings settings(2, 1);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  std::vector<char> a = pattern(4 << 20, 5);
  const size_t bSize = size_t(256) << 20;
  auto b = untouched(bSize);
  NetRequest* sendA = postSend(net, c.send, a.data(), a.size());
  NetRequest* sendB = postSend(net, c.send, b.get(), bSize);
  int done = 0;
  ASSERT_EQ(net.test(sendB, &done, nullptr), ncclSuccess);  // both headers
  std::vector<int> sizes;
  ASSERT_NO_FATAL_FAILURE(waitAll(net, {sendA}, &sizes));  // all of A on the wire, B partly
  ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
  std::vector<char> inA(a.size());
  auto inB = untouched(bSize);
  NetRequest* recvA = postRecv(net, c.recv, inA.data(), inA.size());
  NetRequest* recvB = postRecv(net, c.recv, inB.get(), bSize);
  int size = -1;
  // Takes both headers and wakes the helpers. On two busy cores they may have finished A
  // and failed on B before this returns, so B may already report the failure here.
  const ncclResult_t firstLook = net.test(recvB, &done, nullptr);
  ASSERT_TRUE(firstLook == ncclSuccess || firstLook == ncclRemoteError) << "test(B) gave " << firstLook;
  ASSERT_EQ(done, 0);
  // The helpers finish A and fail on B, in whatever order the two streams get there.
  ncclResult_t result = ncclSuccess;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); !done && Clock::now() < deadline;) {
    result = net.test(recvA, &done, &size);
    if (result != ncclSuccess) break;
  }
  EXPECT_EQ(result, ncclSuccess) << "the failure on B hid that A was done";
  EXPECT_EQ(done, 1);
  EXPECT_EQ(size, static_cast<int>(a.size()));
  EXPECT_TRUE(a == inA);
  EXPECT_EQ(errorWithin(net, recvB, std::chrono::seconds(10)), ncclRemoteError);
}

// A forged sender that announces a message and then says nothing: the receiver's helpers
// wait in poll() on sockets that stay silent, yet closing the comm returns promptly.
TEST_F(SocketNetTest, ThreadsCloseQuicklyWhenThePeerIsSilent) {
  ThreadSettings settings(2, 2);
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const uint32_t dataSockets = 4;
  std::vector<Socket> forged(dataSockets + 1);
  for (uint32_t i = 0; i <= dataSockets; ++i) {
    ASSERT_EQ(Socket::connect(handleAddress(c.handle), Deadline(5, nullptr), &forged[i]), ncclSuccess);
    const wire::Hello hello = wire::makeHello(handleKey(c.handle), 0x51e7, i, dataSockets);
    ASSERT_EQ(forged[i].sendAll(&hello, sizeof(hello), Deadline(5, nullptr)), ncclSuccess);
  }
  NetRecvComm* silent = nullptr;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); silent == nullptr && Clock::now() < deadline;) {
    ASSERT_EQ(net.accept(c.listen, &silent), ncclSuccess);
  }
  ASSERT_NE(silent, nullptr);
  wire::Header header{wire::kHeaderMagic, 0, 1 << 20};
  ASSERT_EQ(forged[0].sendAll(&header, sizeof(header), Deadline(5, nullptr)), ncclSuccess);
  std::vector<char> in(1 << 20);
  NetRequest* waiting = postRecv(net, silent, in.data(), in.size());
  postRecv(net, silent, in.data(), in.size());  // a second one, waiting behind it
  EXPECT_EQ(errorWithin(net, waiting, milliseconds(100)), ncclSuccess) << "a silent peer is no error";
  auto start = Clock::now();
  ASSERT_EQ(net.closeRecv(silent), ncclSuccess);
  EXPECT_LT(Clock::now() - start, kCloseBound) << "closeRecv with helpers waiting on silent sockets";

  // The sending side: a 256 MiB send to a receiver that posts nothing.
  auto out = untouched(size_t(256) << 20);
  NetRequest* send = postSend(net, c.send, out.get(), size_t(256) << 20);
  EXPECT_EQ(errorWithin(net, send, milliseconds(100)), ncclSuccess);
  start = Clock::now();
  ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
  EXPECT_LT(Clock::now() - start, kCloseBound) << "closeSend with helpers waiting for room";
  start = Clock::now();
  ASSERT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_LT(Clock::now() - start, kCloseBound) << "closeRecv with helpers idle";
}

TEST_F(SocketNetTest, ThreadsStartedAreTheThreadsAskedForAndAllAreJoined) {
  const int start = threadCount();
  {
    ThreadSettings settings(4, 2);
    SocketNet net;
    ASSERT_EQ(net.init(), ncclSuccess);
    Connection c;
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
    EXPECT_EQ(threadCountSettlingAt(start + 8), start + 8) << "4 helpers for each of the send and receive comm";
    ASSERT_EQ(net.closeSend(c.send), ncclSuccess);
    EXPECT_EQ(threadCountSettlingAt(start + 4), start + 4) << "after closeSend";
    ASSERT_EQ(net.closeRecv(c.recv), ncclSuccess);
    EXPECT_EQ(threadCountSettlingAt(start), start) << "after closeRecv";
    Connection open;  // left open: destroying the net joins its helpers
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &open));
    EXPECT_EQ(threadCountSettlingAt(start + 8), start + 8);
  }
  EXPECT_EQ(threadCountSettlingAt(start), start) << "after destroying the net";
  {
    ThreadSettings settings(1, 4);  // one thread: no helpers at all
    SocketNet net;
    ASSERT_EQ(net.init(), ncclSuccess);
    Connection c;
    ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
    EXPECT_EQ(threadCount(), start) << "NCCL_SOCKET_NTHREADS=1 started threads";
    ASSERT_NO_FATAL_FAILURE(transfer(net, c, (1 << 20) + 3, (1 << 20) + 3, 77));
  }
}

// The receiver's socket count wins: a sender asking for 4 threads on a connection of one
// data socket gets one helper, and the bytes still arrive.
TEST_F(SocketNetTest, ThreadsAreClampedToTheConnectionsDataSockets) {
  const int start = threadCount();
  std::optional<ThreadSettings> receiverSettings(std::in_place, 1, 1);
  SocketNet receiver;
  ASSERT_EQ(receiver.init(), ncclSuccess);
  receiverSettings.reset();
  ThreadSettings senderSettings(4, 1);
  SocketNet sender;
  ASSERT_EQ(sender.init(), ncclSuccess);
  Connection c;
  ASSERT_EQ(receiver.listen(0, c.handle.data(), &c.listen), ncclSuccess);
  Handle peerHandle = c.handle;
  for (auto deadline = Clock::now() + std::chrono::seconds(5);
       (c.send == nullptr || c.recv == nullptr) && Clock::now() < deadline;) {
    if (c.send == nullptr) {
      ASSERT_EQ(sender.connect(0, peerHandle.data(), &c.send), ncclSuccess);
    }
    if (c.recv == nullptr) {
      ASSERT_EQ(receiver.accept(c.listen, &c.recv), ncclSuccess);
    }
  }
  ASSERT_NE(c.send, nullptr);
  ASSERT_NE(c.recv, nullptr);
  EXPECT_EQ(threadCountSettlingAt(start + 1), start + 1) << "one helper for one data socket, none on the receiver";
  std::vector<char> out = pattern((4 << 20) + 5, 31);
  std::vector<char> in(out.size());
  NetRequest* send = postSend(sender, c.send, out.data(), out.size());
  NetRequest* recv = postRecv(receiver, c.recv, in.data(), in.size());
  int sendDone = 0, recvDone = 0, size = -1;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); !(sendDone && recvDone) && Clock::now() < deadline;) {
    if (!sendDone) {
      ASSERT_EQ(sender.test(send, &sendDone, nullptr), ncclSuccess);
    }
    if (!recvDone) {
      ASSERT_EQ(receiver.test(recv, &recvDone, &size), ncclSuccess);
    }
  }
  ASSERT_TRUE(sendDone && recvDone) << "not done within 10 s";
  EXPECT_EQ(size, static_cast<int>(out.size()));
  EXPECT_TRUE(out == in);
}

}  // namespace
}  // namespace chorus
