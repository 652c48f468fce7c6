// Sockets, addresses and interface selection of the bootstrap network.
#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/debug.h"
#include "core/interfaces.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

SocketAddress loopback4(uint16_t port = 0) {
  SocketAddress a;
  auto* sin = reinterpret_cast<sockaddr_in*>(&a.storage);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin->sin_port = htons(port);
  return a;
}

SocketAddress loopback6(uint16_t port = 0) {
  SocketAddress a;
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_addr = in6addr_loopback;
  sin6->sin6_port = htons(port);
  return a;
}

// A connected pair over a listener on `where`.
void connectedPair(const SocketAddress& where, Socket* client, Socket* server) {
  Socket listener;
  ASSERT_EQ(Socket::listen(where, &listener), ncclSuccess);
  Deadline deadline(10, nullptr);
  ASSERT_EQ(Socket::connect(listener.address(), deadline, client), ncclSuccess);
  ASSERT_EQ(listener.accept(deadline, server), ncclSuccess);
}

// Both directions at once, larger than the kernel's buffers, so transfers are partial.
void exchangeLarge(Socket& a, Socket& b) {
  const size_t size = 8 << 20;
  std::vector<char> aOut(size), bOut(size), aIn(size), bIn(size);
  for (size_t i = 0; i < size; ++i) {
    aOut[i] = static_cast<char>(i * 7 + 1);
    bOut[i] = static_cast<char>(i * 13 + 5);
  }
  Deadline deadline(30, nullptr);
  ncclResult_t aSend = ncclInternalError, bRecv = ncclInternalError;
  std::thread t([&] {
    bRecv = b.recvAll(bIn.data(), size, deadline);
    if (bRecv == ncclSuccess) bRecv = b.sendAll(bOut.data(), size, deadline);
  });
  aSend = a.sendAll(aOut.data(), size, deadline);
  EXPECT_EQ(aSend, ncclSuccess);
  EXPECT_EQ(a.recvAll(aIn.data(), size, deadline), ncclSuccess);
  t.join();
  EXPECT_EQ(bRecv, ncclSuccess);
  EXPECT_EQ(aOut, bIn);
  EXPECT_EQ(bOut, aIn);
}

TEST(SocketTest, ListenOnEphemeralPortAndTransferIPv4) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectedPair(loopback4(), &client, &server));
  EXPECT_NE(client.address().port(), 0);
  EXPECT_EQ(client.address().family(), AF_INET);
  exchangeLarge(client, server);
}

TEST(SocketTest, TransferIPv6) {
  Socket probe;
  if (Socket::listen(loopback6(), &probe) != ncclSuccess) GTEST_SKIP() << "no IPv6 loopback here";
  probe.close();
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectedPair(loopback6(), &client, &server));
  EXPECT_EQ(client.address().family(), AF_INET6);
  EXPECT_EQ(client.address().toString().rfind("[::1]:", 0), 0u) << client.address().toString();
  exchangeLarge(client, server);
}

TEST(SocketTest, AddressText) {
  EXPECT_EQ(loopback4(4242).toString(), "127.0.0.1:4242");
  EXPECT_EQ(loopback6(7).toString(), "[::1]:7");
  SocketAddress empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.length(), 0u);
  EXPECT_EQ(loopback4().length(), sizeof(sockaddr_in));
  EXPECT_EQ(loopback6().length(), sizeof(sockaddr_in6));
}

TEST(SocketTest, IsMoveOnlyAndClosesItsFd) {
  static_assert(!std::is_copy_constructible_v<Socket> && !std::is_copy_assignable_v<Socket>);
  static_assert(std::is_nothrow_move_constructible_v<Socket>);
  int fd = -1;
  {
    Socket listener;
    ASSERT_EQ(Socket::listen(loopback4(), &listener), ncclSuccess);
    fd = listener.fd();
    Socket moved(std::move(listener));
    EXPECT_FALSE(listener.valid());
    EXPECT_EQ(moved.fd(), fd);
    EXPECT_GE(fcntl(fd, F_GETFD), 0);
  }
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(SocketTest, ConnectRetriesUntilTheListenerIsUp) {
  uint16_t port;
  {
    Socket probe;
    ASSERT_EQ(Socket::listen(loopback4(), &probe), ncclSuccess);
    port = probe.address().port();
  }
  Socket client;
  ncclResult_t connected = ncclInternalError;
  std::thread t([&] { connected = Socket::connect(loopback4(port), Deadline(10, nullptr), &client); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Socket listener, server;
  ASSERT_EQ(Socket::listen(loopback4(port), &listener), ncclSuccess);
  ASSERT_EQ(listener.accept(Deadline(10, nullptr), &server), ncclSuccess);
  t.join();
  ASSERT_EQ(connected, ncclSuccess);
  uint32_t value = 0xfeedbeef, got = 0;
  ASSERT_EQ(client.sendAll(&value, sizeof(value), Deadline(5, nullptr)), ncclSuccess);
  ASSERT_EQ(server.recvAll(&got, sizeof(got), Deadline(5, nullptr)), ncclSuccess);
  EXPECT_EQ(got, value);
}

TEST(SocketTest, ConnectGivesUpAtTheDeadline) {
  uint16_t port;
  {
    Socket probe;
    ASSERT_EQ(Socket::listen(loopback4(), &probe), ncclSuccess);
    port = probe.address().port();
  }
  Socket client;
  auto start = Clock::now();
  EXPECT_EQ(Socket::connect(loopback4(port), Deadline(1, nullptr), &client), ncclSystemError);
  double elapsed = secondsSince(start);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 3.0);
  EXPECT_NE(strstr(lastErrorText(), "timed out"), nullptr) << lastErrorText();
  EXPECT_NE(strstr(lastErrorText(), ("127.0.0.1:" + std::to_string(port)).c_str()), nullptr) << lastErrorText();
}

TEST(SocketTest, RecvReportsThePeerClosingAsRemoteError) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectedPair(loopback4(), &client, &server));
  char partial[3] = {1, 2, 3};
  ASSERT_EQ(client.sendAll(partial, sizeof(partial), Deadline(5, nullptr)), ncclSuccess);
  client.close();
  char buffer[10];
  EXPECT_EQ(server.recvAll(buffer, sizeof(buffer), Deadline(5, nullptr)), ncclRemoteError);
  EXPECT_NE(strstr(lastErrorText(), "closed"), nullptr) << lastErrorText();
}

TEST(SocketTest, SendToAClosedPeerFails) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectedPair(loopback4(), &client, &server));
  server.close();
  std::vector<char> data(1 << 20, 'x');
  ncclResult_t res = ncclSuccess;
  // The first writes may still be buffered; the reset shows up soon after.
  for (int i = 0; i < 50 && res == ncclSuccess; ++i)
    res = client.sendAll(data.data(), data.size(), Deadline(5, nullptr));
  EXPECT_EQ(res, ncclRemoteError);
}

TEST(SocketTest, AbortFlagInterruptsAWaitWithinASecond) {
  Socket client, server;
  ASSERT_NO_FATAL_FAILURE(connectedPair(loopback4(), &client, &server));
  std::atomic<uint32_t> abortFlag{0};
  Clock::time_point abortedAt;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abortedAt = Clock::now();
    abortFlag.store(1);
  });
  char buffer[4];
  ncclResult_t res = server.recvAll(buffer, sizeof(buffer), Deadline(300, &abortFlag));
  auto returnedAt = Clock::now();
  aborter.join();
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_LT(std::chrono::duration<double>(returnedAt - abortedAt).count(), 1.0);
  EXPECT_NE(strstr(lastErrorText(), "aborted"), nullptr) << lastErrorText();
}

TEST(SocketTest, TryAcceptWithNothingQueuedReturnsNoSocket) {
  Socket listener, accepted;
  ASSERT_EQ(Socket::listen(loopback4(), &listener), ncclSuccess);
  EXPECT_EQ(listener.tryAccept(&accepted), ncclSuccess);
  EXPECT_FALSE(accepted.valid());
}

// accept(2): Linux reports a network error pending on the connection it would return from
// accept() itself, and says to retry on ENETDOWN, EPROTO, ENOPROTOOPT, EHOSTDOWN, ENONET,
// EHOSTUNREACH, EOPNOTSUPP and ENETUNREACH as on EAGAIN; ECONNABORTED likewise. The
// listener's own failures are not among them.
TEST(SocketTest, AcceptErrorsOfTheConnectionAreRetriedAndTheListenersAreNot) {
  for (int err :
       {ECONNABORTED, ENETDOWN, EPROTO, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH})
    EXPECT_TRUE(acceptedConnectionFailed(err)) << strerror(err);
  for (int err : {EBADF, EINVAL, ENOTSOCK, EFAULT, EMFILE, EAGAIN})
    EXPECT_FALSE(acceptedConnectionFailed(err)) << strerror(err);
}

// ---- interface selection ----

TEST(SocketInterfaceTest, PrefixListMatchesByPrefix) {
  EXPECT_TRUE(matchInterface("eth", "eth0"));
  EXPECT_TRUE(matchInterface("eth", "eth"));
  EXPECT_TRUE(matchInterface("ib,eth", "eth1"));
  EXPECT_TRUE(matchInterface("ib,eth", "ib0"));
  EXPECT_FALSE(matchInterface("eth", "en0"));
  EXPECT_FALSE(matchInterface("eth0", "eth"));
  EXPECT_FALSE(matchInterface("ib,eth", "lo"));
}

TEST(SocketInterfaceTest, CaretExcludes) {
  EXPECT_FALSE(matchInterface("^docker,lo", "lo"));
  EXPECT_FALSE(matchInterface("^docker,lo", "docker0"));
  EXPECT_TRUE(matchInterface("^docker,lo", "eth0"));
  EXPECT_TRUE(matchInterface("^eth", "ib0"));
  EXPECT_FALSE(matchInterface("^eth", "eth3"));
}

TEST(SocketInterfaceTest, EqualsMeansExactNames) {
  EXPECT_TRUE(matchInterface("=eth0", "eth0"));
  EXPECT_FALSE(matchInterface("=eth0", "eth00"));
  EXPECT_FALSE(matchInterface("=eth", "eth0"));
  EXPECT_TRUE(matchInterface("=eth0,ib1", "ib1"));
  EXPECT_FALSE(matchInterface("^=eth0", "eth0"));
  EXPECT_TRUE(matchInterface("^=eth0", "eth00"));
}

TEST(SocketInterfaceTest, EmptyListsMatchEverything) {
  EXPECT_TRUE(matchInterface("", "eth0"));
  EXPECT_TRUE(matchInterface("^", "lo"));
  EXPECT_TRUE(matchInterface(",", "lo"));
  EXPECT_TRUE(matchInterface("eth,,ib", "ib0"));
  EXPECT_FALSE(matchInterface("eth,,ib", "lo"));
}

TEST(SocketInterfaceTest, ListsLoopbackOnlyWhenAsked) {
  auto lo = listInterfaces("=lo", AF_INET);
  ASSERT_EQ(lo.size(), 1u);
  EXPECT_EQ(lo[0].name, "lo");
  EXPECT_EQ(lo[0].address.toString(), "127.0.0.1:0");
  for (const NetInterface& i : listInterfaces("^lo", AF_UNSPEC)) {
    EXPECT_NE(i.name, "lo");
  }
  for (const NetInterface& i : listInterfaces("", AF_INET6)) {
    EXPECT_EQ(i.address.family(), AF_INET6) << i.name;
  }
}

TEST(SocketInterfaceTest, SocketIfnameSettingPicksTheInterface) {
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  NetInterface chosen;
  EXPECT_EQ(findBootstrapInterface(AF_INET, &chosen), ncclSuccess);
  EXPECT_EQ(chosen.name, "lo");
  setenv("NCCL_SOCKET_IFNAME", "=no-such-interface", 1);
  EXPECT_EQ(findBootstrapInterface(AF_UNSPEC, &chosen), ncclSystemError);
  EXPECT_NE(strstr(lastErrorText(), "no-such-interface"), nullptr) << lastErrorText();
  unsetenv("NCCL_SOCKET_IFNAME");
  // The default prefers anything over loopback when something else is up.
  ASSERT_EQ(findBootstrapInterface(AF_UNSPEC, &chosen), ncclSuccess);
  if (!listInterfaces("^docker,lo", AF_UNSPEC).empty()) {
    EXPECT_NE(chosen.name, "lo");
  }
}

TEST(SocketInterfaceTest, SocketFamilySetting) {
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  EXPECT_EQ(socketFamilySetting(), AF_INET6);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET", 1);
  EXPECT_EQ(socketFamilySetting(), AF_INET);
  NetInterface chosen;
  ASSERT_EQ(findBootstrapInterface(AF_UNSPEC, &chosen), ncclSuccess);
  EXPECT_EQ(chosen.address.family(), AF_INET);
  unsetenv("NCCL_SOCKET_FAMILY");
  EXPECT_EQ(socketFamilySetting(), AF_UNSPEC);
}

TEST(SocketInterfaceTest, ParsesHostPort) {
  SocketAddress a;
  ASSERT_EQ(parseHostPort("127.0.0.1:1234", AF_UNSPEC, &a), ncclSuccess);
  EXPECT_EQ(a.toString(), "127.0.0.1:1234");
  ASSERT_EQ(parseHostPort("[::1]:80", AF_UNSPEC, &a), ncclSuccess);
  EXPECT_EQ(a.toString(), "[::1]:80");
  ASSERT_EQ(parseHostPort("::1:81", AF_UNSPEC, &a), ncclSuccess);
  EXPECT_EQ(a.toString(), "[::1]:81");
  ASSERT_EQ(parseHostPort("localhost:99", AF_INET, &a), ncclSuccess);
  EXPECT_EQ(a.toString(), "127.0.0.1:99");
  EXPECT_EQ(parseHostPort("127.0.0.1", AF_UNSPEC, &a), ncclInvalidArgument);
  EXPECT_EQ(parseHostPort("127.0.0.1:0", AF_UNSPEC, &a), ncclInvalidArgument);
  EXPECT_EQ(parseHostPort("127.0.0.1:70000", AF_UNSPEC, &a), ncclInvalidArgument);
  EXPECT_EQ(parseHostPort("127.0.0.1:12x", AF_UNSPEC, &a), ncclInvalidArgument);
  EXPECT_EQ(parseHostPort("[::1:5", AF_UNSPEC, &a), ncclInvalidArgument);
}

}  // namespace
}  // namespace chorus
