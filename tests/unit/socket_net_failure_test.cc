// The socket net when things go wrong: peers that close mid-message, closed listeners,
// malformed hellos and headers from raw clients, bad arguments, and cleanup of every socket.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "socket_net_fixture.h"

namespace chorus {
namespace {

using namespace socket_net_test;

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

// Sends `message` and tests it until it is done: in the kernel's buffers, whether or not
// the receiver reads.
void sendIntoKernelBuffers(Net& net, const Connection& c, std::vector<char>& message) {
  NetRequest* request = nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (request == nullptr && Clock::now() < deadline)
    ASSERT_EQ(net.isend(c.send, message.data(), static_cast<int>(message.size()), 0, nullptr, &request), ncclSuccess);
  ASSERT_NE(request, nullptr);
  int done = 0;
  while (!done && Clock::now() < deadline) ASSERT_EQ(net.test(request, &done, nullptr), ncclSuccess);
  ASSERT_TRUE(done) << "a send did not complete into the kernel's buffers";
}

// A sender that closes right after its last send completed (as a rank destroying its
// communicator does) while its receiver is still reading, with a note from the receiver
// unread: every message still arrives whole. (A close with unread input resets the
// connection, and a reset drops what the kernel had not delivered yet.)
TEST_F(SocketNetTest, ACloseAfterTheLastSendDeliversEverythingDespiteUnreadNotes) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  const std::vector<char> note(kNetNoteBytes, 'N');
  ASSERT_EQ(net.sendNote(c.recv, note.data()), ncclSuccess);  // never taken by the sender
  constexpr int kMessages = 64;
  constexpr size_t kBytes = 32 << 10;  // inline: on the stream the note came back on
  std::vector<std::vector<char>> out(kMessages), in(kMessages, std::vector<char>(kBytes, 0));
  for (int i = 0; i < kMessages; ++i) out[i] = pattern(kBytes, static_cast<uint32_t>(100 + i));
  // The sends complete into the kernel's buffers while nobody reads (2 MiB fits).
  for (std::vector<char>& message : out) ASSERT_NO_FATAL_FAILURE(sendIntoKernelBuffers(net, c, message));
  // The receiver starts reading 100 ms after the sender began to close.
  std::atomic<int> received{0};
  ncclResult_t receiveResult = ncclSuccess;
  std::thread receiver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < kMessages; ++i) {
      void* data = in[i].data();
      int size = static_cast<int>(kBytes);
      NetRequest* request = nullptr;
      if ((receiveResult = net.irecv(c.recv, 1, &data, &size, nullptr, nullptr, &request)) != ncclSuccess) return;
      int done = 0;
      auto deadline = Clock::now() + std::chrono::seconds(5);
      while (!done && Clock::now() < deadline)
        if ((receiveResult = net.test(request, &done, &size)) != ncclSuccess) return;
      if (!done || size != static_cast<int>(kBytes) || in[i] != out[i]) return;
      ++received;
    }
  });
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  receiver.join();
  EXPECT_EQ(receiveResult, ncclSuccess);
  EXPECT_EQ(received.load(), kMessages) << "messages lost or damaged when the sender closed";
  EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net.closeListen(c.listen), ncclSuccess);
}

// A send comm whose connection failed (abandonSend) closes at once, even while its peer
// reads nothing and most of what was sent is still undelivered.
TEST_F(SocketNetTest, AnAbandonedSendCommClosesWithoutWaitingForDelivery) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(net, &c));
  std::vector<char> out(32 << 10, 'a');
  for (int i = 0; i < 64; ++i) ASSERT_NO_FATAL_FAILURE(sendIntoKernelBuffers(net, c, out));  // 2 MiB, none of it read
  net.abandonSend(c.send);
  const auto start = Clock::now();
  EXPECT_EQ(net.closeSend(c.send), ncclSuccess);
  // A normal close would wait for the peer (2 s without progress at the least).
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(net.closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net.closeListen(c.listen), ncclSuccess);
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

// After junk sent to `c`'s listener: accept() meets all of it (and takes none of it as a
// connection), then a real connect and accept pair up.
void connectPastJunk(SocketNet& net, Connection* c) {
  for (int i = 0; i < 10; ++i) {
    NetRecvComm* recv = nullptr;
    ASSERT_EQ(net.accept(c->listen, &recv), ncclSuccess);
    ASSERT_EQ(recv, nullptr) << "a junk connection was accepted";
  }
  Handle peerHandle = c->handle;
  for (auto deadline = Clock::now() + std::chrono::seconds(5);
       (c->send == nullptr || c->recv == nullptr) && Clock::now() < deadline;) {
    if (c->send == nullptr) {
      ASSERT_EQ(net.connect(0, peerHandle.data(), &c->send), ncclSuccess);
    }
    if (c->recv == nullptr) {
      ASSERT_EQ(net.accept(c->listen, &c->recv), ncclSuccess);
    }
  }
  ASSERT_NE(c->send, nullptr);
  ASSERT_NE(c->recv, nullptr);
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
  const wire::Hello hello = wire::makeHello(handleKey(c.handle), 99, 0, 1);
  Socket truncated = rawClient(c.handle);
  sendRaw(truncated, &hello, 10);
  truncated.close();
  Socket silent = rawClient(c.handle);  // connects, says nothing, stays open
  sendRaw(silent, &hello, 5);
  const wire::Hello huge = wire::makeHello(handleKey(c.handle), 100, 0, 1u << 31);
  Socket hugeCount = rawClient(c.handle);
  sendRaw(hugeCount, &huge, sizeof(huge));
  // Two sockets past the last index: were they counted, connection 101 would be complete.
  const wire::Hello badIndex[2] = {wire::makeHello(handleKey(c.handle), 101, 7, 1),
                                   wire::makeHello(handleKey(c.handle), 101, 2, 1)};
  Socket outOfRange[2] = {rawClient(c.handle), rawClient(c.handle)};
  sendRaw(outOfRange[0], &badIndex[0], sizeof(wire::Hello));
  sendRaw(outOfRange[1], &badIndex[1], sizeof(wire::Hello));
  ASSERT_NO_FATAL_FAILURE(connectPastJunk(net, &c));
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, (1 << 20) + 3, (1 << 20) + 3, 50));
}

// A local process that connects first, with well-formed hellos but no proof of the
// listener's key (none, or a guessed key), does not take the connection: the rank that holds
// the handle gets it, and its bytes arrive.
TEST_F(SocketNetTest, ForgedHellosWithoutTheKeyDoNotTakeTheConnection) {
  SocketNet net;
  ASSERT_EQ(net.init(), ncclSuccess);
  Connection c;
  ASSERT_EQ(net.listen(0, c.handle.data(), &c.listen), ncclSuccess);
  const SipKey guessed{handleKey(c.handle).k0 ^ 1, handleKey(c.handle).k1};
  std::vector<Socket> forgers;
  for (uint32_t i = 0; i < 2; ++i) {  // a complete connection's worth: control and one data socket
    wire::Hello noProof = wire::makeHello(handleKey(c.handle), 0xf00d, i, 1);
    noProof.proof = 0;
    forgers.push_back(rawClient(c.handle));
    sendRaw(forgers.back(), &noProof, sizeof(noProof));
    const wire::Hello wrongKey = wire::makeHello(guessed, 0xbeef, i, 1);
    forgers.push_back(rawClient(c.handle));
    sendRaw(forgers.back(), &wrongKey, sizeof(wrongKey));
  }
  ASSERT_NO_FATAL_FAILURE(connectPastJunk(net, &c));
  ASSERT_NO_FATAL_FAILURE(transfer(net, c, 4099, 4099, 51));
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
    size_t bytes;         // of the header sent
    size_t payloadBytes;  // of an inline payload sent behind it
  };
  const Case cases[] = {
      {"huge length", {wire::kHeaderMagic, 0, uint64_t(1) << 40}, sizeof(wire::Header), 0},
      {"longer than the receive", {wire::kHeaderMagic, 0, 4097}, sizeof(wire::Header), 0},
      {"bad magic", {0xdeadbeef, 0, 16}, sizeof(wire::Header), 0},
      {"truncated header", {wire::kHeaderMagic, 0, 16}, 7, 0},
      {"truncated inline payload", {wire::kHeaderMagic, 0, 16}, sizeof(wire::Header), 5},
      {"note of a huge length", {wire::kNoteMagic, 0, uint64_t(1) << 40}, sizeof(wire::Header), 0},
      {"note shorter than a note", {wire::kNoteMagic, 0, 8}, sizeof(wire::Header), 8},
      {"truncated note", {wire::kNoteMagic, 0, kNetNoteBytes}, sizeof(wire::Header), 5},
  };
  static_assert(wire::travelsInline(16));
  uint64_t connectionId = 0x5eed;
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    Socket control = rawClient(good.handle);
    Socket data = rawClient(good.handle);
    const wire::Hello hellos[2] = {wire::makeHello(handleKey(good.handle), connectionId, 0, 1),
                                   wire::makeHello(handleKey(good.handle), connectionId, 1, 1)};
    ++connectionId;
    sendRaw(control, &hellos[0], sizeof(wire::Hello));
    sendRaw(data, &hellos[1], sizeof(wire::Hello));
    NetRecvComm* forged = nullptr;
    for (auto deadline = Clock::now() + std::chrono::seconds(5); forged == nullptr && Clock::now() < deadline;) {
      ASSERT_EQ(net.accept(good.listen, &forged), ncclSuccess);
    }
    ASSERT_NE(forged, nullptr);
    sendRaw(control, &test.header, test.bytes);
    const std::vector<char> payload(test.payloadBytes, 'x');
    if (!payload.empty()) sendRaw(control, payload.data(), payload.size());
    if (test.bytes < sizeof(wire::Header) || test.payloadBytes > 0) control.close();
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
