// The bootstrap network: ranks as threads of this process.
#include "src/bootstrap/bootstrap.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "core/interfaces.h"
#include "core/socket.h"
#include "src/bootstrap/bootstrap_root.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
using BootstrapList = std::vector<std::unique_ptr<Bootstrap>>;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Creates `nranks` bootstraps concurrently, one thread per rank, over one id or several.
BootstrapList createAll(std::span<const ncclUniqueId> ids, int nranks,
                        const std::atomic<uint32_t>* abortFlag = nullptr) {
  BootstrapList all(nranks);
  std::vector<ncclResult_t> results(nranks, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] { results[r] = Bootstrap::create(ids, r, nranks, abortFlag, &all[r]); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    if (results[r] == ncclSuccess) {
      EXPECT_EQ(all[r]->rank(), r);
      EXPECT_EQ(all[r]->nranks(), nranks);
    }
  }
  return all;
}
BootstrapList createAll(const ncclUniqueId& id, int nranks, const std::atomic<uint32_t>* abortFlag = nullptr) {
  return createAll(std::span<const ncclUniqueId>(&id, 1), nranks, abortFlag);
}

// Runs `body(rank, bootstrap)` on every rank concurrently.
void onEveryRank(BootstrapList& all, const std::function<void(int, Bootstrap&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < all.size(); ++r) threads.emplace_back([&, r] { body(static_cast<int>(r), *all[r]); });
  for (auto& t : threads) t.join();
}

uint8_t slotByte(int owner, size_t i) { return static_cast<uint8_t>(owner * 37 + i * 11 + 3); }

// Every rank fills its slot with its own pattern; every slot must arrive intact.
void checkAllGather(BootstrapList& all, size_t bytesPerRank) {
  const int nranks = static_cast<int>(all.size());
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    std::vector<uint8_t> data(bytesPerRank * nranks, 0xee);
    for (size_t i = 0; i < bytesPerRank; ++i) data[rank * bytesPerRank + i] = slotByte(rank, i);
    ASSERT_EQ(b.allGather(data.data(), bytesPerRank), ncclSuccess) << "rank " << rank;
    for (int owner = 0; owner < nranks; ++owner) {
      for (size_t i = 0; i < bytesPerRank; ++i) {
        ASSERT_EQ(data[owner * bytesPerRank + i], slotByte(owner, i))
            << "rank " << rank << " slot " << owner << " byte " << i;
      }
    }
  });
}

UniqueIdContents newRoot(ncclUniqueId* id) {
  EXPECT_EQ(bootstrapGetUniqueId(id), ncclSuccess);
  UniqueIdContents contents;
  EXPECT_TRUE(unpackUniqueId(*id, &contents));
  return contents;
}

// A raw connection to `where` that sends `bytes` (possibly none) and stays open.
Socket intruder(const SocketAddress& where, const void* bytes, size_t size) {
  Socket s;
  EXPECT_EQ(Socket::connect(where, Deadline(10, nullptr), &s), ncclSuccess);
  if (size > 0) {
    EXPECT_EQ(s.sendAll(bytes, size, Deadline(10, nullptr)), ncclSuccess);
  }
  return s;
}

std::vector<char> randomBytes(size_t size) {
  std::mt19937 gen(12345);
  std::vector<char> bytes(size);
  for (char& c : bytes) c = static_cast<char>(gen());
  return bytes;
}

// ---- unique id ----

TEST(BootstrapTest, UniqueIdRoundTripsIPv4AndIPv6) {
  for (int family : {AF_INET, AF_INET6}) {
    UniqueIdContents in;
    in.secret = 0x0123456789abcdefull;
    in.root.storage.ss_family = static_cast<sa_family_t>(family);
    if (family == AF_INET) {
      inet_pton(AF_INET, "10.1.2.3", &reinterpret_cast<sockaddr_in*>(&in.root.storage)->sin_addr);
    } else {
      inet_pton(AF_INET6, "fd00::17", &reinterpret_cast<sockaddr_in6*>(&in.root.storage)->sin6_addr);
    }
    in.root.setPort(31337);
    ncclUniqueId id;
    memset(&id, 0x5a, sizeof(id));
    packUniqueId(in, &id);
    UniqueIdContents out;
    ASSERT_TRUE(unpackUniqueId(id, &out));
    EXPECT_EQ(out.secret, in.secret);
    EXPECT_EQ(out.root.toString(), in.root.toString());
    EXPECT_EQ(memcmp(&out.root.storage, &in.root.storage, in.root.length()), 0);
    // Nothing beyond the address is left over from before.
    for (size_t i = sizeof(uint64_t) + in.root.length(); i < sizeof(id.internal); ++i) EXPECT_EQ(id.internal[i], 0);
  }
  ncclUniqueId zero{};
  UniqueIdContents none;
  EXPECT_FALSE(unpackUniqueId(zero, &none));
}

TEST(BootstrapTest, GetUniqueIdStartsARootWithARandomSecret) {
  ncclUniqueId a, b;
  UniqueIdContents ca = newRoot(&a), cb = newRoot(&b);
  EXPECT_NE(ca.secret, cb.secret);
  EXPECT_NE(ca.root.port(), 0);
  EXPECT_NE(ca.root.port(), cb.root.port());
  // Each root is live: a one-rank communicator on each completes (and ends the root).
  EXPECT_EQ(createAll(a, 1).size(), 1u);
  EXPECT_EQ(createAll(b, 1).size(), 1u);
  EXPECT_EQ(bootstrapGetUniqueId(nullptr), ncclInvalidArgument);
}

TEST(BootstrapTest, CreateRejectsBadArguments) {
  ncclUniqueId id;
  newRoot(&id);
  std::unique_ptr<Bootstrap> b;
  EXPECT_EQ(Bootstrap::create(id, 0, 0, nullptr, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::create(id, 2, 2, nullptr, &b), ncclInvalidArgument);
  EXPECT_EQ(Bootstrap::create(id, -1, 2, nullptr, &b), ncclInvalidArgument);
  ncclUniqueId empty{};
  EXPECT_EQ(Bootstrap::create(empty, 0, 1, nullptr, &b), ncclInvalidArgument);
  EXPECT_EQ(b, nullptr);
  createAll(id, 1);  // let the root finish
}

// ---- all-gather ----

class BootstrapAllGatherTest : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapAllGatherTest, EveryRankSeesEverySlot) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, GetParam());
  ASSERT_FALSE(::testing::Test::HasFailure());
  checkAllGather(all, 1);
  checkAllGather(all, 100);
  checkAllGather(all, 0);
  // Larger than socket buffers: send and receive must overlap in each ring step.
  checkAllGather(all, 3 << 20);
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapAllGatherTest, ::testing::Values(1, 2, 3, 8));

// ---- point-to-point ----

TEST(BootstrapTest, SendRecvAnyPairAnyOrderAndTags) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 3);
  ASSERT_FALSE(HasFailure());
  auto value = [](int from, int to, int tag, int seq) { return from * 1000000 + to * 10000 + tag * 100 + seq; };
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    // Send everything first (tags 0..2, two messages per tag, self included), then
    // receive in reverse tag order: all of it arrives before it is awaited.
    for (int peer = 0; peer < 3; ++peer) {
      for (int tag = 0; tag < 3; ++tag) {
        for (int seq = 0; seq < 2; ++seq) {
          int v = value(rank, peer, tag, seq);
          ASSERT_EQ(b.send(peer, tag, &v, sizeof(v)), ncclSuccess);
        }
      }
    }
    for (int peer = 2; peer >= 0; --peer) {
      for (int tag = 2; tag >= 0; --tag) {
        for (int seq = 0; seq < 2; ++seq) {  // same (peer, tag): first in, first out
          int v = -1;
          ASSERT_EQ(b.recv(peer, tag, &v, sizeof(v)), ncclSuccess);
          EXPECT_EQ(v, value(peer, rank, tag, seq));
        }
      }
    }
  });
}

TEST(BootstrapTest, RecvWaitsForALateSendAndEarlyMessagesWait) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    if (rank == 0) {
      uint64_t v = 0;
      ASSERT_EQ(b.recv(1, 7, &v, sizeof(v)), ncclSuccess);  // posted before rank 1 sends
      EXPECT_EQ(v, 0x77ull);
      ASSERT_EQ(b.barrier(), ncclSuccess);
      // Rank 1 sent tag 8 before the barrier; it has been waiting here since.
      ASSERT_EQ(b.recv(1, 8, &v, sizeof(v)), ncclSuccess);
      EXPECT_EQ(v, 0x88ull);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      uint64_t v = 0x77;
      ASSERT_EQ(b.send(0, 7, &v, sizeof(v)), ncclSuccess);
      v = 0x88;
      ASSERT_EQ(b.send(0, 8, &v, sizeof(v)), ncclSuccess);
      ASSERT_EQ(b.barrier(), ncclSuccess);
    }
  });
}

TEST(BootstrapTest, LargeMessagesBothWaysAtOnceDoNotDeadlock) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  const size_t size = 16 << 20;
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    std::vector<char> out(size, static_cast<char>('a' + rank)), in(size, 0);
    ASSERT_EQ(b.send(1 - rank, 1, out.data(), size), ncclSuccess);
    ASSERT_EQ(b.recv(1 - rank, 1, in.data(), size), ncclSuccess);
    EXPECT_EQ(in, std::vector<char>(size, static_cast<char>('a' + 1 - rank)));
  });
}

TEST(BootstrapTest, RecvOfTheWrongSizeFails) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  int v = 5;
  ASSERT_EQ(all[1]->send(0, 3, &v, sizeof(v)), ncclSuccess);
  int64_t big = 0;
  EXPECT_EQ(all[0]->recv(1, 3, &big, sizeof(big)), ncclInternalError);
  EXPECT_EQ(all[0]->send(2, 0, &v, sizeof(v)), ncclInvalidArgument);
  EXPECT_EQ(all[0]->recv(-1, 0, &v, sizeof(v)), ncclInvalidArgument);
}

TEST(BootstrapTest, BarrierHoldsEveryRankUntilAllArrive) {
  ncclUniqueId id;
  newRoot(&id);
  const int nranks = 4;
  BootstrapList all = createAll(id, nranks);
  ASSERT_FALSE(HasFailure());
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> arrived{0};
    onEveryRank(all, [&](int rank, Bootstrap& b) {
      if (rank == round) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a late rank
      arrived.fetch_add(1);
      ASSERT_EQ(b.barrier(), ncclSuccess);
      EXPECT_EQ(arrived.load(), nranks) << "rank " << rank << " left the barrier early in round " << round;
    });
  }
}

// ---- intruders ----

TEST(BootstrapTest, IntrudersAtTheRootDoNotHarmTheCommunicator) {
  ncclUniqueId id;
  UniqueIdContents root = newRoot(&id);
  RootHello wrongSecret{};
  wrongSecret.secret = root.secret ^ 1;
  wrongSecret.rank = 0;
  wrongSecret.nranks = 3;
  RootHello badRank{};
  badRank.secret = root.secret;
  badRank.rank = 7;
  badRank.nranks = 3;
  RootHello truncated = badRank;
  truncated.rank = 1;
  std::vector<char> garbage = randomBytes(500);
  std::vector<Socket> intruders;
  intruders.push_back(intruder(root.root, nullptr, 0));  // connects and says nothing
  intruders.push_back(intruder(root.root, &wrongSecret, sizeof(wrongSecret)));
  intruders.push_back(intruder(root.root, garbage.data(), garbage.size()));
  intruders.push_back(intruder(root.root, &badRank, sizeof(badRank)));  // right secret, rank out of range
  {
    Socket shortReport = intruder(root.root, &truncated, sizeof(truncated) / 2);  // closes mid-report
  }
  auto start = Clock::now();
  BootstrapList all = createAll(id, 3);
  ASSERT_FALSE(HasFailure());
  // The silent connection must not hold the root up until it is dropped.
  EXPECT_LT(secondsSince(start), kHelloTimeoutSeconds - 1.0);
  checkAllGather(all, 64);
}

SocketAddress loopbackAddress() {
  SocketAddress a;
  a.storage.ss_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(&a.storage)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// The test plays the root, so it learns where ranks listen and can reach their
// listeners while the ring is being formed: `beforeReply` runs after every rank has
// reported and before any is answered.
BootstrapList createWithTestRoot(int nranks, uint64_t secret, std::vector<SocketAddress>* listenAt,
                                 const std::function<void()>& beforeReply) {
  Socket testRoot;
  EXPECT_EQ(Socket::listen(loopbackAddress(), &testRoot), ncclSuccess);
  ncclUniqueId id;
  packUniqueId({secret, testRoot.address()}, &id);
  BootstrapList all;
  std::thread ranks([&] { all = createAll(id, nranks); });
  std::vector<Socket> rankSockets(nranks);
  listenAt->assign(nranks, SocketAddress());
  for (int i = 0; i < nranks; ++i) {
    Socket s;
    RootHello hello{};
    EXPECT_EQ(testRoot.accept(Deadline(30, nullptr), &s), ncclSuccess);
    EXPECT_EQ(s.recvAll(&hello, sizeof(hello), Deadline(30, nullptr)), ncclSuccess);
    EXPECT_EQ(hello.secret, secret);
    EXPECT_EQ(hello.nranks, nranks);
    if (hello.rank < 0 || hello.rank >= nranks) {
      ADD_FAILURE() << "rank " << hello.rank;
      break;
    }
    (*listenAt)[hello.rank].assign(reinterpret_cast<sockaddr*>(&hello.listenAddress), sizeof(hello.listenAddress));
    rankSockets[hello.rank] = std::move(s);
  }
  beforeReply();
  for (int r = 0; r < nranks; ++r) {
    RootReply reply{};
    reply.successorAddress = (*listenAt)[(r + 1) % nranks].storage;
    EXPECT_EQ(rankSockets[r].sendAll(&reply, sizeof(reply), Deadline(10, nullptr)), ncclSuccess);
  }
  ranks.join();
  return all;
}

TEST(BootstrapTest, IntrudersAtRankListenersDoNotHarmTheCommunicator) {
  const int nranks = 3;
  const uint64_t secret = 0x5ec4e75ec4e7ull;
  std::vector<SocketAddress> listenAt;
  std::vector<Socket> intruders;
  std::vector<char> garbage = randomBytes(300);
  BootstrapList all = createWithTestRoot(nranks, secret, &listenAt, [&] {
    // Queued on every listener before the ranks start accepting their ring peers.
    for (int r = 0; r < nranks; ++r) {
      WireHeader forged{secret ^ 0xff, (r + nranks - 1) % nranks, kWireRingHello, 0, 0, 0};
      WireHeader wrongPeer{secret, (r + 1) % nranks, kWireRingHello, 0, 0, 0};  // not the predecessor
      intruders.push_back(intruder(listenAt[r], nullptr, 0));
      intruders.push_back(intruder(listenAt[r], &forged, sizeof(forged)));
      intruders.push_back(intruder(listenAt[r], garbage.data(), garbage.size()));
      if (nranks > 2) intruders.push_back(intruder(listenAt[r], &wrongPeer, sizeof(wrongPeer)));
    }
  });
  ASSERT_FALSE(HasFailure());
  checkAllGather(all, 40);
  // And after set-up, while point-to-point traffic flows.
  WireHeader forgedMessage{secret + 1, 1, kWireP2pMessage, 5, 0, 4};
  intruders.push_back(intruder(listenAt[0], &forgedMessage, sizeof(forgedMessage)));
  intruders.push_back(intruder(listenAt[0], garbage.data(), garbage.size()));
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    int v = rank + 100;
    if (rank != 0) {
      ASSERT_EQ(b.send(0, 5, &v, sizeof(v)), ncclSuccess);
    } else {
      for (int peer = 1; peer < nranks; ++peer) {
        ASSERT_EQ(b.recv(peer, 5, &v, sizeof(v)), ncclSuccess);
        EXPECT_EQ(v, peer + 100);
      }
    }
  });
}

TEST(BootstrapTest, ARankDropsAConnectionThatNeverPresentsItself) {
  std::vector<SocketAddress> listenAt;
  std::vector<Socket> silent;
  BootstrapList all =
      createWithTestRoot(2, 42, &listenAt, [&] { silent.push_back(intruder(listenAt[0], nullptr, 0)); });
  ASSERT_FALSE(HasFailure());
  // Rank 0 keeps serving while it waits; the silent connection is closed after kHelloTimeoutSeconds.
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    int v = 9;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kHelloTimeoutSeconds * 1000 + 700));
      ASSERT_EQ(b.send(0, 1, &v, sizeof(v)), ncclSuccess);
    } else {
      ASSERT_EQ(b.recv(1, 1, &v, sizeof(v)), ncclSuccess);
    }
  });
  char byte;
  size_t received = 0;
  bool closed = false;
  ASSERT_EQ(waitForFd(silent[0].fd(), POLLIN, Deadline(2, nullptr), "the drop"), ncclSuccess);
  EXPECT_EQ(silent[0].tryRecv(&byte, 1, &received, &closed), ncclSuccess);
  EXPECT_TRUE(closed);
}

// ---- the root protocol itself ----

TEST(BootstrapTest, RootDropsDuplicateAndInconsistentReportsAndAnswersTheRest) {
  Socket listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
  const SocketAddress rootAt = listener.address();
  const uint64_t secret = 77;
  ncclResult_t rootResult = ncclInternalError;
  std::thread root([&] { rootResult = runBootstrapRoot(std::move(listener), secret, 30); });
  auto report = [&](int rank, int nranks, uint16_t port) {
    RootHello hello{};
    hello.secret = secret;
    hello.rank = rank;
    hello.nranks = nranks;
    hello.block = RootBlock{0, nranks};
    SocketAddress where = loopbackAddress();
    where.setPort(port);
    hello.listenAddress = where.storage;
    Socket s = intruder(rootAt, &hello, sizeof(hello));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // keep the arrival order
    return s;
  };
  Socket first = report(0, 2, 1000);
  Socket duplicate = report(0, 2, 2000);
  Socket mismatched = report(1, 3, 3000);
  Socket noAddress = intruder(rootAt, &secret, sizeof(secret));  // right secret, then silence
  Socket second = report(1, 2, 4000);
  root.join();
  EXPECT_EQ(rootResult, ncclSuccess);
  RootReply reply{};
  SocketAddress successor;
  ASSERT_EQ(first.recvAll(&reply, sizeof(reply), Deadline(5, nullptr)), ncclSuccess);
  successor.assign(reinterpret_cast<sockaddr*>(&reply.successorAddress), sizeof(reply.successorAddress));
  EXPECT_EQ(successor.port(), 4000);
  ASSERT_EQ(second.recvAll(&reply, sizeof(reply), Deadline(5, nullptr)), ncclSuccess);
  successor.assign(reinterpret_cast<sockaddr*>(&reply.successorAddress), sizeof(reply.successorAddress));
  EXPECT_EQ(successor.port(), 1000);
  // The dropped ones see their connection closed without an answer.
  for (Socket* dropped : {&duplicate, &mismatched, &noAddress}) {
    EXPECT_EQ(dropped->recvAll(&reply, sizeof(reply), Deadline(5, nullptr)), ncclRemoteError);
  }
}

// A root that one rank of two reached gives up with a WARN; one that no rank ever reached
// (an unused id) ends quietly.
TEST(BootstrapTest, RootGivesUpAfterItsTimeout) {
  Socket listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
  const SocketAddress rootAt = listener.address();
  RootHello hello{};
  hello.secret = 1;
  hello.rank = 0;
  hello.nranks = 2;
  hello.block = RootBlock{0, 2};
  hello.listenAddress = loopbackAddress().storage;
  auto start = Clock::now();
  ncclResult_t result = ncclSuccess;
  clearLastError();  // the root's WARN comes from its own thread: read through to the process's last error
  std::thread root([&] { result = runBootstrapRoot(std::move(listener), 1, 1); });
  Socket reporter = intruder(rootAt, &hello, sizeof(hello));
  root.join();
  EXPECT_EQ(result, ncclSystemError);
  EXPECT_LT(secondsSince(start), 3.0);
  EXPECT_NE(strstr(lastErrorText(), "1 of 2 ranks"), nullptr) << lastErrorText();

  static std::atomic<int> warns{0};
  setenv("NCCL_DEBUG", "WARN", 1);  // the sink sees only what the level lets through
  resetDebugInit();
  setLogSink([](LogLevel level, uint64_t, const char*, int, const char*) { warns += level == LogLevel::Warn; });
  Socket unused;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &unused), ncclSuccess);
  EXPECT_EQ(runBootstrapRoot(std::move(unused), 1, 1), ncclSuccess);
  setLogSink(nullptr);
  unsetenv("NCCL_DEBUG");
  resetDebugInit();
  EXPECT_EQ(warns.load(), 0) << "no WARN from a root nobody used";
}

// NCCL's spread of ranks over roots: balanced, the first roots one larger.
TEST(BootstrapTest, RanksSpreadOverRootsAsNccl) {
  for (int nranks : {1, 2, 5, 7, 16}) {
    for (int nroots = 1; nroots <= nranks; ++nroots) {
      int expectFirst = 0;
      for (int k = 0; k < nroots; ++k) {
        const RootBlock block = blockOfRoot(k, nranks, nroots);
        EXPECT_EQ(block.first, expectFirst);
        EXPECT_EQ(block.count, nranks / nroots + (k < nranks % nroots ? 1 : 0));
        for (int r = block.first; r < block.first + block.count; ++r) EXPECT_EQ(rootOfRank(r, nranks, nroots), k);
        expectFirst += block.count;
      }
      EXPECT_EQ(expectFirst, nranks);
    }
  }
}

// ncclCommInitRankScalable's bootstrap: every root serves a block, the blocks join into
// one ring, and ids beyond the rank count go unused.
TEST(BootstrapTest, SeveralRootsFormOneRing) {
  for (auto [nranks, nids] : {std::pair{7, 3}, std::pair{4, 4}, std::pair{2, 5}}) {
    std::vector<ncclUniqueId> ids(nids);
    for (auto& id : ids) ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
    BootstrapList all = createAll(ids, nranks);
    checkAllGather(all, 24);
    onEveryRank(all, [](int, Bootstrap& b) { EXPECT_EQ(b.barrier(), ncclSuccess); });
  }
}

// ---- IPv6 ----

TEST(BootstrapTest, FormsOverIPv6) {
  if (listInterfaces("", AF_INET6).empty()) GTEST_SKIP() << "no IPv6 interface is up";
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  ncclUniqueId id;
  UniqueIdContents contents = newRoot(&id);
  unsetenv("NCCL_SOCKET_FAMILY");
  EXPECT_EQ(contents.root.family(), AF_INET6);
  BootstrapList all = createAll(id, 3);
  ASSERT_FALSE(HasFailure());
  checkAllGather(all, 24);
}

// ---- NCCL_COMM_ID ----

TEST(BootstrapTest, CommIdStartsTheRootInRankZero) {
  uint16_t port;
  {
    SocketAddress any;
    any.storage.ss_family = AF_INET;
    reinterpret_cast<sockaddr_in*>(&any.storage)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    Socket probe;
    ASSERT_EQ(Socket::listen(any, &probe), ncclSuccess);
    port = probe.address().port();
  }
  const std::string commId = "127.0.0.1:" + std::to_string(port);
  setenv("NCCL_COMM_ID", commId.c_str(), 1);
  ncclUniqueId a, b;
  ASSERT_EQ(bootstrapGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(bootstrapGetUniqueId(&b), ncclSuccess);
  // Every process derives the same id from the setting, and no root is listening yet.
  EXPECT_EQ(memcmp(&a, &b, sizeof(a)), 0);
  UniqueIdContents contents;
  ASSERT_TRUE(unpackUniqueId(a, &contents));
  EXPECT_EQ(contents.root.toString(), commId);
  EXPECT_NE(contents.secret, 0u);
  Socket probe;
  EXPECT_NE(Socket::connect(contents.root, Deadline(1, nullptr), &probe), ncclSuccess);

  BootstrapList all = createAll(a, 3);
  unsetenv("NCCL_COMM_ID");
  ASSERT_FALSE(HasFailure());
  checkAllGather(all, 16);
}

// A communicator made from another (ncclCommSplit) needs a root of its own even where
// NCCL_COMM_ID names the job's: that address is already taken by the parent's root.
TEST(BootstrapTest, FreshRootIgnoresCommId) {
  setenv("NCCL_COMM_ID", "127.0.0.1:1", 1);
  ncclUniqueId configured, fresh;
  ASSERT_EQ(bootstrapGetUniqueId(&configured), ncclSuccess);
  ASSERT_EQ(bootstrapGetUniqueId(&fresh, RootPlacement::kFresh), ncclSuccess);
  unsetenv("NCCL_COMM_ID");
  UniqueIdContents a, b;
  ASSERT_TRUE(unpackUniqueId(configured, &a));
  ASSERT_TRUE(unpackUniqueId(fresh, &b));
  EXPECT_TRUE(a.rootStartedByRank0);
  EXPECT_EQ(a.root.toString(), "127.0.0.1:1");
  EXPECT_FALSE(b.rootStartedByRank0);
  EXPECT_NE(b.root.toString(), "127.0.0.1:1");
  BootstrapList all = createAll(fresh, 2);  // its root is already listening
  ASSERT_FALSE(HasFailure());
  checkAllGather(all, 8);
}

// ---- timeouts and aborts ----

TEST(BootstrapTest, RecvTimesOut) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "1", 1);
  int v = 0;
  auto start = Clock::now();
  ncclResult_t res = all[0]->recv(1, 99, &v, sizeof(v));
  double elapsed = secondsSince(start);
  unsetenv("CHORUS_BOOTSTRAP_TIMEOUT");
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 3.0);
  EXPECT_NE(strstr(lastErrorText(), "timed out"), nullptr) << lastErrorText();
  EXPECT_NE(strstr(lastErrorText(), "rank 1"), nullptr) << lastErrorText();
}

TEST(BootstrapTest, CreateGivesUpWhenTheRootIsUnreachable) {
  uint16_t port;
  SocketAddress where;
  where.storage.ss_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(&where.storage)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  {
    Socket probe;
    ASSERT_EQ(Socket::listen(where, &probe), ncclSuccess);
    port = probe.address().port();
  }
  where.setPort(port);
  ncclUniqueId id;
  packUniqueId({0x1234, where}, &id);
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "1", 1);
  std::unique_ptr<Bootstrap> b;
  auto start = Clock::now();
  ncclResult_t res = Bootstrap::create(id, 0, 2, nullptr, &b);
  unsetenv("CHORUS_BOOTSTRAP_TIMEOUT");
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_LT(secondsSince(start), 3.0);
  EXPECT_NE(strstr(lastErrorText(), where.toString().c_str()), nullptr) << lastErrorText();
}

TEST(BootstrapTest, AbortFlagInterruptsABlockedRecv) {
  ncclUniqueId id;
  newRoot(&id);
  std::atomic<uint32_t> abortFlag{0};
  BootstrapList all = createAll(id, 2, &abortFlag);
  ASSERT_FALSE(HasFailure());
  Clock::time_point abortedAt;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    abortedAt = Clock::now();
    abortFlag.store(1);
  });
  int v = 0;
  ncclResult_t res = all[0]->recv(1, 1, &v, sizeof(v));
  auto returnedAt = Clock::now();
  aborter.join();
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_LT(std::chrono::duration<double>(returnedAt - abortedAt).count(), 1.0);
  EXPECT_NE(strstr(lastErrorText(), "aborted"), nullptr) << lastErrorText();
}

TEST(BootstrapTest, RecvFromARankThatLeftFailsPromptly) {
  ncclUniqueId id;
  newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  int v = 11;
  ASSERT_EQ(all[1]->send(0, 1, &v, sizeof(v)), ncclSuccess);
  all[1].reset();
  auto start = Clock::now();
  v = 0;
  ASSERT_EQ(all[0]->recv(1, 1, &v, sizeof(v)), ncclSuccess);  // sent before it left
  EXPECT_EQ(v, 11);
  EXPECT_EQ(all[0]->recv(1, 2, &v, sizeof(v)), ncclRemoteError);
  EXPECT_LT(secondsSince(start), 2.0);
}

}  // namespace
}  // namespace chorus
