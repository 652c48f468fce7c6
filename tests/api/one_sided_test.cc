// One-sided calls on memory windows (ncclPutSignal, ncclSignal, ncclWaitSignal) through
// the public API, between ranks as threads (P2P), as processes (SHM) and as processes over
// the network transport (NET, forced with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE):
//  - puts land exactly their bytes at their offset in the target's window, over several
//    FIFO steps, and nothing else of the window changes;
//  - every rank putting to every other rank before any waits completes (a put never waits
//    for its target to call anything);
//  - one thread driving all ranks may list a wait before the put it waits for in a group;
//  - a wait for a peer that died fails within seconds; an abort ends a wait;
//  - every bad argument is refused with the error NCCL gives and a WARN naming it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness/byte_pattern.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned char kUntouched = 0xEE;
constexpr size_t kWindowBytes = 1 << 20;
// Larger than a FIFO step (128 KiB by default) and not a multiple of anything.
constexpr size_t kPutBytes = 300 * 1024 + 13;

std::string lastError(ncclComm_t comm) { return ncclGetLastError(comm); }

// The first byte of window[from, to) that is not kUntouched, if any.
std::string checkUntouched(const std::vector<unsigned char>& window, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i)
    if (window[i] != kUntouched) return "byte " + std::to_string(i) + " outside every put changed";
  return "";
}

std::string checkPattern(const std::vector<unsigned char>& window, size_t offset, size_t bytes, uint64_t key) {
  if (auto bad = findPatternMismatch(window.data() + offset, bytes, key))
    return "put at offset " + std::to_string(offset) + ": byte " + std::to_string(*bad) + " differs";
  return "";
}

// Every rank has finished what it did before (an AllReduce of one float).
ncclResult_t allRanksReach(ncclComm_t comm) {
  float one = 1, sum = 0;
  return ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, comm, nullptr);
}

class OneSidedTest : public testing::TestWithParam<std::tuple<Link, int>> {};

// Each rank puts to its successor three times (two of bytes, one of floats, at different
// offsets) and waits for its predecessor's signal each time; then a signal without data.
TEST_P(OneSidedTest, RingPutsLandExactBytes) {
  const auto [link, nranks] = GetParam();
  ScopedEnv env;
  forceLink(env, link);
  EXPECT_RANKS_OK(runRanks(launchModeOf(link), nranks, [](const RankContext& c) {
    std::vector<unsigned char> window(kWindowBytes, kUntouched);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(c.comm, window.data(), window.size(), &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return RankOutcome::fail("register: " + lastError(c.comm));
    const int next = (c.rank + 1) % c.nranks, prev = (c.rank + c.nranks - 1) % c.nranks;
    const size_t offsets[3] = {8, kPutBytes + 16, 2 * kPutBytes + 40};
    for (int round = 0; round < 3; ++round) {
      std::vector<unsigned char> src(kPutBytes + 3);
      fillPattern(src.data(), src.size(), patternKey(round, c.rank, next));
      const bool floats = round == 1;  // count in elements of the type
      const size_t bytes = floats ? kPutBytes / 4 * 4 : kPutBytes;
      ncclResult_t r = ncclPutSignal(src.data(), floats ? bytes / 4 : bytes, floats ? ncclFloat32 : ncclUint8, next,
                                     win, offsets[round], 0, 0, 0, c.comm, nullptr);
      if (r != ncclSuccess) return RankOutcome::fail("put: " + resultName(r) + " " + lastError(c.comm));
      ncclWaitSignalDesc_t desc = {1, prev, 0, 0};
      if ((r = ncclWaitSignal(1, &desc, c.comm, nullptr)) != ncclSuccess)
        return RankOutcome::fail("wait: " + resultName(r) + " " + lastError(c.comm));
      if (std::string bad = checkPattern(window, offsets[round], bytes, patternKey(round, prev, c.rank)); !bad.empty())
        return RankOutcome::fail(bad);
    }
    std::string bad = checkUntouched(window, 0, offsets[0]) +
                      checkUntouched(window, offsets[0] + kPutBytes, offsets[1]) +
                      checkUntouched(window, offsets[1] + kPutBytes / 4 * 4, offsets[2]) +
                      checkUntouched(window, offsets[2] + kPutBytes, window.size());
    if (!bad.empty()) return RankOutcome::fail(bad);
    if (ncclSignal(next, 0, 0, 0, c.comm, nullptr) != ncclSuccess) return RankOutcome::fail("signal");
    ncclWaitSignalDesc_t desc = {1, prev, 0, 0};
    if (ncclWaitSignal(1, &desc, c.comm, nullptr) != ncclSuccess) return RankOutcome::fail("wait for the signal");
    // Nobody may still be putting into the window when it goes.
    if (allRanksReach(c.comm) != ncclSuccess) return RankOutcome::fail("allreduce after the puts");
    if (ncclCommWindowDeregister(c.comm, win) != ncclSuccess) return RankOutcome::fail("deregister");
    return RankOutcome::pass();
  }));
}

// Every rank puts 2 MiB to every other rank first, then waits for all of them: two-sided
// sends would deadlock here once the FIFOs are full.
TEST_P(OneSidedTest, EveryRankPutsToEveryOtherBeforeWaiting) {
  const auto [link, nranks] = GetParam();
  ScopedEnv env;
  forceLink(env, link);
  EXPECT_RANKS_OK(runRanks(launchModeOf(link), nranks, [](const RankContext& c) {
    constexpr size_t kSlice = 2 << 20;
    std::vector<unsigned char> window(kSlice * c.nranks, kUntouched);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(c.comm, window.data(), window.size(), &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return RankOutcome::fail("register");
    std::vector<std::vector<unsigned char>> src(c.nranks, std::vector<unsigned char>(kSlice));
    std::vector<ncclWaitSignalDesc_t> descs;
    for (int peer = 0; peer < c.nranks; ++peer) {
      if (peer == c.rank) continue;
      fillPattern(src[peer].data(), kSlice, patternKey(7, c.rank, peer));
      const ncclResult_t r =
          ncclPutSignal(src[peer].data(), kSlice, ncclInt8, peer, win, kSlice * c.rank, 0, 0, 0, c.comm, nullptr);
      if (r != ncclSuccess) return RankOutcome::fail("put to " + std::to_string(peer) + ": " + resultName(r));
      descs.push_back({1, peer, 0, 0});
    }
    if (ncclWaitSignal(static_cast<int>(descs.size()), descs.data(), c.comm, nullptr) != ncclSuccess)
      return RankOutcome::fail("wait: " + lastError(c.comm));
    for (int peer = 0; peer < c.nranks; ++peer) {
      std::string bad = peer == c.rank ? checkUntouched(window, kSlice * peer, kSlice * (peer + 1))
                                       : checkPattern(window, kSlice * peer, kSlice, patternKey(7, peer, c.rank));
      if (!bad.empty()) return RankOutcome::fail("from rank " + std::to_string(peer) + ": " + bad);
    }
    if (allRanksReach(c.comm) != ncclSuccess) return RankOutcome::fail("allreduce");
    ncclCommWindowDeregister(c.comm, win);
    return RankOutcome::pass();
  }));
}

INSTANTIATE_TEST_SUITE_P(Links, OneSidedTest,
                         testing::Combine(testing::Values(Link::kP2p, Link::kShm, Link::kNet), testing::Values(2, 4)),
                         [](const testing::TestParamInfo<std::tuple<Link, int>>& info) {
                           return std::string(linkName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// One thread, both ranks of ncclCommInitAll: registrations in one group; a group that lists
// the wait before the put it waits for, with an AllReduce between them.
TEST(OneSided, OneThreadListsTheWaitBeforeThePut) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  std::vector<unsigned char> window[2] = {std::vector<unsigned char>(kWindowBytes, kUntouched),
                                          std::vector<unsigned char>(kWindowBytes, kUntouched)};
  ncclWindow_t win[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(ncclCommWindowRegister(comms[r], window[r].data(), kWindowBytes, &win[r], 0), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<unsigned char> src(kPutBytes);
  fillPattern(src.data(), src.size(), patternKey(1, 0, 1));
  float in[2] = {1, 2}, out[2] = {0, 0};
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclWaitSignal(1, &desc, comms[1], nullptr), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(ncclAllReduce(&in[r], &out[r], 1, ncclFloat32, ncclSum, comms[r], nullptr), ncclSuccess);
  EXPECT_EQ(ncclPutSignal(src.data(), kPutBytes, ncclUint8, 1, win[0], 100, 0, 0, 0, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(checkPattern(window[1], 100, kPutBytes, patternKey(1, 0, 1)), "");
  EXPECT_EQ(checkUntouched(window[1], 0, 100) + checkUntouched(window[1], 100 + kPutBytes, kWindowBytes), "");
  EXPECT_EQ(checkUntouched(window[0], 0, kWindowBytes), "") << "rank 0's own window is not the target";
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 3.0f);
  // Two waits for one signal each need two signals: the signal above was consumed.
  ASSERT_EQ(ncclSignal(1, 0, 0, 0, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(ncclSignal(1, 0, 0, 0, comms[0], nullptr), ncclSuccess);
  desc.opCnt = 2;
  EXPECT_EQ(ncclWaitSignal(1, &desc, comms[1], nullptr), ncclSuccess);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(OneSided, PutToItself) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<unsigned char> window(4096, kUntouched);
  ncclWindow_t win = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(comm, window.data(), window.size(), &win, 0), ncclSuccess);
  const int32_t values[3] = {7, -8, 9};
  ASSERT_EQ(ncclPutSignal(values, 3, ncclInt32, 0, win, 16, 0, 0, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclPutSignal(nullptr, 0, ncclInt32, 0, win, 4096, 0, 0, 0, comm, nullptr), ncclSuccess)
      << "an empty put at the window's end still signals";
  ncclWaitSignalDesc_t desc = {2, 0, 0, 0};
  EXPECT_EQ(ncclWaitSignal(1, &desc, comm, nullptr), ncclSuccess);
  int32_t landed[3];
  std::memcpy(landed, window.data() + 16, sizeof landed);
  EXPECT_EQ(landed[0], 7);
  EXPECT_EQ(landed[1], -8);
  EXPECT_EQ(landed[2], 9);
  EXPECT_EQ(checkUntouched(window, 0, 16) + checkUntouched(window, 28, 4096), "");
  EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(OneSided, BadArgumentsAreRefusedWithAWarn) {
  ncclComm_t comms[2] = {nullptr, nullptr}, other = nullptr;
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommInitAll(&other, 1, nullptr), ncclSuccess);
  int x = 0;
  EXPECT_EQ(ncclSignal(1, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument) << "no window registered yet";
  EXPECT_NE(lastError(comms[0]).find("ncclCommWindowRegister"), std::string::npos) << lastError(comms[0]);
  std::vector<unsigned char> window[2] = {std::vector<unsigned char>(4096), std::vector<unsigned char>(4096)};
  ncclWindow_t win[2] = {nullptr, nullptr}, otherWin = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommWindowRegister(comms[r], window[r].data(), 4096, &win[r], 0);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclCommWindowRegister(other, &x, sizeof x, &otherWin, 0), ncclSuccess);
  struct Refusal {
    ncclResult_t got;
    ncclResult_t expected;
    const char* inWarn;
  };
  const Refusal refusals[] = {
      {ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 0, 1, 0, 0, comms[0], nullptr), ncclInvalidArgument, "sigIdx 1"},
      {ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 0, 0, 1, 0, comms[0], nullptr), ncclInvalidArgument, "ctx 1"},
      {ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 0, 0, 0, 4, comms[0], nullptr), ncclInvalidArgument, "flags 0x4"},
      {ncclPutSignal(&x, 1, ncclInt32, 2, win[0], 0, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument, "peer 2"},
      {ncclPutSignal(&x, 1, ncclInt32, -1, win[0], 0, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument, "peer -1"},
      {ncclPutSignal(&x, 1, ncclInt32, 1, nullptr, 0, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument, "peerWin"},
      {ncclPutSignal(&x, 1, ncclInt32, 0, otherWin, 0, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument,
       "not a window of communicator"},
      {ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 4093, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument,
       "peerWinOffset 4093"},
      {ncclPutSignal(&x, 1, ncclInt32, 1, win[0], SIZE_MAX, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument,
       "do not fit"},
      {ncclPutSignal(nullptr, 1, ncclInt32, 1, win[0], 0, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument,
       "localbuff"},
      {ncclPutSignal(&x, 1, static_cast<ncclDataType_t>(99), 1, win[0], 0, 0, 0, 0, comms[0], nullptr),
       ncclInvalidArgument, "99"},
      {ncclSignal(1, 0, 0, 1, comms[0], nullptr), ncclInvalidArgument, "flags 0x1"},
      {ncclSignal(5, 0, 0, 0, comms[0], nullptr), ncclInvalidArgument, "peer 5"},
      {ncclWaitSignal(-1, nullptr, comms[0], nullptr), ncclInvalidArgument, "nDesc -1"},
      {ncclWaitSignal(1, nullptr, comms[0], nullptr), ncclInvalidArgument, "nDesc 1"},
  };
  for (const Refusal& r : refusals) {
    EXPECT_EQ(r.got, r.expected) << r.inWarn;
  }
  // Each WARN is checked right after its call: the last error is the latest WARN.
  auto warnOf = [&](ncclResult_t got) {
    EXPECT_EQ(got, ncclInvalidArgument);
    return lastError(comms[0]);
  };
  EXPECT_NE(warnOf(ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 4093, 0, 0, 0, comms[0], nullptr)).find("4093"),
            std::string::npos);
  EXPECT_NE(warnOf(ncclPutSignal(&x, 1, ncclInt32, 1, win[0], 0, 2, 0, 0, comms[0], nullptr)).find("sigIdx 2"),
            std::string::npos);
  ncclWaitSignalDesc_t bad[2] = {{1, 1, 0, 0}, {-3, 1, 0, 0}};
  EXPECT_NE(warnOf(ncclWaitSignal(2, bad, comms[0], nullptr)).find("opCnt -3"), std::string::npos);
  bad[1] = {1, 9, 0, 0};
  EXPECT_NE(warnOf(ncclWaitSignal(2, bad, comms[0], nullptr)).find("peer 9"), std::string::npos);
  EXPECT_EQ(ncclWaitSignal(0, nullptr, comms[0], nullptr), ncclSuccess) << "nothing to wait for";
  // None of the refusals sent anything: rank 1 has no signal and its window is unchanged.
  ASSERT_EQ(ncclSignal(1, 0, 0, 0, comms[0], nullptr), ncclSuccess);
  ncclWaitSignalDesc_t one = {1, 0, 0, 0};
  EXPECT_EQ(ncclWaitSignal(1, &one, comms[1], nullptr), ncclSuccess);
  EXPECT_EQ(window[1], std::vector<unsigned char>(4096, 0));
  // A refused call does not break the communicator.
  float in = 1, out = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (ncclComm_t c : comms) ncclAllReduce(&in, &out, 1, ncclFloat32, ncclSum, c, nullptr);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommWindowDeregister(comms[r], win[r]);
  ncclCommWindowDeregister(other, otherWin);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  ncclCommDestroy(other);
}

// A wait for the signal of a rank that was SIGKILLed fails within seconds (CHORUS_TIMEOUT at
// its default of 600 s, so only noticing the death can pass) with a WARN naming the rank.
class OneSidedDeadPeerTest : public testing::TestWithParam<Link> {};

TEST_P(OneSidedDeadPeerTest, AWaitForADeadRankFails) {
  ScopedEnv env;
  forceLink(env, GetParam());
  env.unset("CHORUS_TIMEOUT");
  LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init");
        std::vector<unsigned char> window(4096);
        ncclWindow_t win = nullptr;
        if (ncclCommWindowRegister(comm, window.data(), window.size(), &win, 0) != ncclSuccess)
          return RankOutcome::fail("register");
        // Rank 1 dies only once rank 0's registration is done (its signal says so): a death
        // during the collective registration would rightly fail the registration instead.
        if (rank == 1) {
          ncclWaitSignalDesc_t fromZero = {1, 0, 0, 0};
          if (ncclWaitSignal(1, &fromZero, comm, nullptr) != ncclSuccess) return RankOutcome::fail("signal");
          raise(SIGKILL);
        }
        // Rank 1 may be dead before this signal's send completes: either outcome is right.
        (void)ncclSignal(1, 0, 0, 0, comm, nullptr);
        const auto start = Clock::now();
        ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
        const ncclResult_t r = ncclWaitSignal(1, &desc, comm, nullptr);
        const double took = std::chrono::duration<double>(Clock::now() - start).count();
        if (r != ncclRemoteError && r != ncclSystemError) return RankOutcome::fail("wait returned " + resultName(r));
        if (took > 30) return RankOutcome::fail("the wait took " + std::to_string(took) + " s");
        const std::string warn = lastError(comm);
        if (warn.find("peer rank 1") == std::string::npos) return RankOutcome::fail("WARN: " + warn);
        ncclCommAbort(comm);
        return RankOutcome::pass();
      },
      std::chrono::seconds(90));
  ASSERT_EQ(result.ranks.size(), 2u);
  EXPECT_TRUE(result.ranks[0].ok) << result.ranks[0].message;
}

INSTANTIATE_TEST_SUITE_P(Links, OneSidedDeadPeerTest, testing::Values(Link::kShm, Link::kNet),
                         [](const testing::TestParamInfo<Link>& info) { return linkName(info.param); });

// ncclCommAbort from another thread ends a wait for a signal that never comes.
TEST(OneSided, AbortEndsAWait) {
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  std::vector<unsigned char> window[2] = {std::vector<unsigned char>(4096), std::vector<unsigned char>(4096)};
  ncclWindow_t win[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommWindowRegister(comms[r], window[r].data(), 4096, &win[r], 0);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::thread aborter([&] {
    // Late enough that the wait has begun, on a loaded machine too: an abort that comes
    // before the call enters frees the communicator the call is handed (a caller's race).
    std::this_thread::sleep_for(std::chrono::seconds(2));
    EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  });
  const auto start = Clock::now();
  ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
  EXPECT_EQ(ncclWaitSignal(1, &desc, comms[0], nullptr), ncclSystemError);
  aborter.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
}

// A non-blocking communicator: the registration and the calls return ncclInProgress and
// finish on their own; ncclCommGetAsyncError says when.
TEST(OneSided, NonBlockingCommunicators) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& uid) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    auto settle = [&](ncclResult_t r) {
      while (r == ncclInProgress) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ncclCommGetAsyncError(comm, &r);
      }
      return r;
    };
    if (settle(ncclCommInitRankConfig(&comm, nranks, uid, rank, &config)) != ncclSuccess)
      return RankOutcome::fail("init");
    std::vector<unsigned char> window(8192, kUntouched);
    ncclWindow_t win = nullptr;
    if (settle(ncclCommWindowRegister(comm, window.data(), window.size(), &win, 0)) != ncclSuccess || !win)
      return RankOutcome::fail("register");
    std::vector<unsigned char> src(5000);
    fillPattern(src.data(), src.size(), patternKey(3, rank, 1 - rank));
    if (settle(ncclPutSignal(src.data(), src.size(), ncclUint8, 1 - rank, win, 1000, 0, 0, 0, comm, nullptr)) !=
        ncclSuccess)
      return RankOutcome::fail("put");
    ncclWaitSignalDesc_t desc = {1, 1 - rank, 0, 0};
    if (settle(ncclWaitSignal(1, &desc, comm, nullptr)) != ncclSuccess) return RankOutcome::fail("wait");
    if (std::string bad = checkPattern(window, 1000, src.size(), patternKey(3, 1 - rank, rank)); !bad.empty())
      return RankOutcome::fail(bad);
    ncclCommWindowDeregister(comm, win);
    return ncclCommDestroy(comm) == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy");
  }));
}

}  // namespace
}  // namespace chorus_test
