// The bootstrap network: ranks as threads of this process.

#include "core/interfaces.h"
#include "tests/unit/bootstrap_fixture.h"

namespace chorus {
namespace {

using namespace bootstrap_testing;

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

// A loopback port nothing listens on now (the kernel's pick for a listener just closed).
uint16_t freeLoopbackPort() {
  Socket probe;
  EXPECT_EQ(Socket::listen(loopbackAddress(), &probe), ncclSuccess);
  return probe.address().port();
}

TEST(BootstrapTest, CommIdStartsTheRootInRankZero) {
  const std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
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

// Under NCCL_COMM_ID every communicator's root is at the same address, with the same secret:
// one communicator after another, each rank 0 starts a root there again. (A rank of the next
// that reaches the last root as it closes tries again: reportTo.)
TEST(BootstrapTest, CommIdServesOneCommunicatorAfterAnother) {
  const std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  setenv("NCCL_COMM_ID", commId.c_str(), 1);
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  for (int comm = 0; comm < 8 && !HasFailure(); ++comm) {
    BootstrapList all = createAll(id, 3);
    ASSERT_FALSE(HasFailure()) << "communicator " << comm;
    checkAllGather(all, 16);
  }
  unsetenv("NCCL_COMM_ID");
}

// The previous communicator's root can still hold the NCCL_COMM_ID address (it closes a
// moment after answering its last rank) when the next communicator's first rank starts a
// root there: that rank tries again until the address is free, and the set-up completes.
// (Before, it failed at once, and the other ranks waited for a root until the timeout.)
TEST(BootstrapTest, CommIdRootWaitsForThePreviousRootToLeave) {
  const std::string commId = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  setenv("NCCL_COMM_ID", commId.c_str(), 1);
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "20", 1);
  ncclUniqueId id;
  ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  UniqueIdContents contents;
  ASSERT_TRUE(unpackUniqueId(id, &contents));
  Socket previousRoot;
  ASSERT_EQ(Socket::listen(contents.root, &previousRoot), ncclSuccess);
  std::thread leaves([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    previousRoot.close();
  });
  BootstrapList all = createAll(id, 3);
  leaves.join();
  unsetenv("CHORUS_BOOTSTRAP_TIMEOUT");
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
