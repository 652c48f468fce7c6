// Communicators made from another, through the public API. ncclCommSplit: who lands where
// (color, then key, then parent rank), NCCL_SPLIT_NOCOLOR, splits of splits, several
// splits of one parent in one group, non-blocking parents and config inheritance,
// collectives on parent and children interleaved. ncclCommShrink: survivors renumbered,
// NCCL_SHRINK_ABORT past a SIGKILLed rank and past a silent one with work stuck on it.
// ncclCommRevoke. And the arguments each refuses. Every child's AllReduce is checked
// against the sum over exactly its members.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// Each parent rank contributes its parent rank + 1, so a child's sum names its members.
int32_t memberSum(const std::vector<int>& parentRanks) {
  int32_t sum = 0;
  for (int r : parentRanks) sum += r + 1;
  return sum;
}

// An int32 AllReduce of `value` on `comm` (blocking); "" when every element is `want`.
std::string allReduceGives(ncclComm_t comm, int32_t value, int32_t want, const std::string& what) {
  std::vector<int32_t> data(1031, value);
  const ncclResult_t r = ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, comm, nullptr);
  if (r != ncclSuccess) return what + ": AllReduce returned " + resultName(r);
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != want) {
      return what + ": element " + std::to_string(i) + " is " + std::to_string(data[i]) + ", expected " +
             std::to_string(want);
    }
  }
  return "";
}

// From one thread: in one group, an int32 AllReduce on each of `comms` where comms[i]
// gives i + 1; "" when every rank's every element is `want`.
std::string groupAllReduceGives(const std::vector<ncclComm_t>& comms, int32_t want) {
  std::vector<std::vector<int32_t>> data(comms.size());
  ncclGroupStart();
  for (size_t i = 0; i < comms.size(); ++i) {
    data[i].assign(10, static_cast<int32_t>(i) + 1);
    ncclAllReduce(data[i].data(), data[i].data(), 10, ncclInt32, ncclSum, comms[i], nullptr);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess) return "the AllReduce group returned " + resultName(end);
  for (size_t i = 0; i < comms.size(); ++i)
    for (int32_t v : data[i])
      if (v != want)
        return "rank " + std::to_string(i) + " got " + std::to_string(v) + ", expected " + std::to_string(want);
  return "";
}

// The child's rank and size, checked against what the split must give.
void expectPlace(FailureLog& log, ncclComm_t child, int wantRank, int wantCount, const std::string& what) {
  int rank = -1, count = -1;
  if (ncclCommUserRank(child, &rank) != ncclSuccess || rank != wantRank)
    log.add(what + ": rank " + std::to_string(rank) + ", expected " + std::to_string(wantRank));
  if (ncclCommCount(child, &count) != ncclSuccess || count != wantCount)
    log.add(what + ": count " + std::to_string(count) + ", expected " + std::to_string(wantCount));
}

ncclResult_t waitWhileInProgress(ncclComm_t comm, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const Clock::time_point deadline = Clock::now() + limit;
  ncclResult_t state = ncclInProgress;
  while (Clock::now() < deadline) {
    const ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ncclInProgress;
}

// One thread drives 4 ranks: the splits must be in a group. Color = parent rank % 2 and
// key = 10 - parent rank reverse each color's order: color 0 is {2, 0}, color 1 {3, 1}.
// A rank that stays silent (calls nothing) until `done` reaches `others`, then leaves by
// aborting its communicator.
RankOutcome staySilentUntil(const std::atomic<int>& done, int others, ncclComm_t comm) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (done.load() < others && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ncclCommAbort(comm);
  return RankOutcome::pass();
}

// Ranks 0 and 1, shrunk past rank 2: a blocking AllReduce on `child` sums theirs; then
// `child` is destroyed.
void checkSurvivorsAllReduce(ncclComm_t child, int rank, FailureLog& log) {
  std::vector<int32_t> values(5, rank + 1);
  if (ncclAllReduce(values.data(), values.data(), 5, ncclInt32, ncclSum, child, nullptr) != ncclSuccess ||
      values[4] != memberSum({0, 1}))
    log.add("the shrunk AllReduce gave " + std::to_string(values[4]));
  ncclCommDestroy(child);
}

TEST(CommSplit, ColorsAndKeysInOneGroupFromOneThread) {
  EXPECT_RANKS_OK(runAllRanksOneThread(4, [](std::span<const ncclComm_t> comms) {
    const int n = static_cast<int>(comms.size());
    std::vector<RankOutcome> outcomes(n);
    std::vector<ncclComm_t> children(n, nullptr);
    ncclGroupStart();
    std::vector<ncclResult_t> split(n);
    for (int r = 0; r < n; ++r) split[r] = ncclCommSplit(comms[r], r % 2, 10 - r, &children[r], nullptr);
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess) {
      for (auto& o : outcomes) o = RankOutcome::fail("ncclGroupEnd after the splits returned " + resultName(end));
      return outcomes;
    }
    // Children and parent in one group, twice, interleaved.
    std::vector<std::vector<int32_t>> childData(n, std::vector<int32_t>(513)), parentData(n, std::vector<int32_t>(77));
    for (int round = 0; round < 2; ++round) {
      for (int r = 0; r < n; ++r) {
        childData[r].assign(513, r + 1);
        parentData[r].assign(77, r + 1);
      }
      ncclGroupStart();
      for (int r = 0; r < n; ++r) {
        ncclAllReduce(childData[r].data(), childData[r].data(), 513, ncclInt32, ncclSum, children[r], nullptr);
        ncclAllReduce(parentData[r].data(), parentData[r].data(), 77, ncclInt32, ncclSum, comms[r], nullptr);
      }
      const ncclResult_t ran = ncclGroupEnd();
      for (int r = 0; r < n; ++r) {
        FailureLog log;
        if (split[r] != ncclSuccess) log.add("ncclCommSplit returned " + resultName(split[r]));
        if (ran != ncclSuccess) log.add("the AllReduce group returned " + resultName(ran));
        const std::vector<int> members = r % 2 == 0 ? std::vector<int>{2, 0} : std::vector<int>{3, 1};
        expectPlace(log, children[r], r < 2 ? 1 : 0, 2, "child of parent rank " + std::to_string(r));
        if (childData[r][512] != memberSum(members) || childData[r][0] != memberSum(members))
          log.add("child AllReduce gave " + std::to_string(childData[r][0]) + ", expected " +
                  std::to_string(memberSum(members)));
        if (parentData[r][76] != memberSum({0, 1, 2, 3}))
          log.add("parent AllReduce gave " + std::to_string(parentData[r][76]));
        if (!log.empty()) outcomes[r] = log.outcome();
      }
    }
    for (ncclComm_t c : children)
      if (c != nullptr && ncclCommDestroy(c) != ncclSuccess) outcomes[0] = RankOutcome::fail("destroying a child");
    return outcomes;
  }));
}

class CommSplitModes : public testing::TestWithParam<LaunchMode> {};

// A rank per thread or process, each calling ncclCommSplit on its own: equal keys keep the
// parent's order; NCCL_SPLIT_NOCOLOR gives no communicator; a child splits again.
TEST_P(CommSplitModes, NoColorEqualKeysAndSplitsOfSplits) {
  EXPECT_RANKS_OK(runRanks(GetParam(), 5, [](const RankContext& ctx) {
    FailureLog log;
    const int color = ctx.rank == 4 ? NCCL_SPLIT_NOCOLOR : 7;
    ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);  // must be overwritten
    const ncclResult_t split = ncclCommSplit(ctx.comm, color, /*key=*/0, &child, nullptr);
    if (split != ncclSuccess) return RankOutcome::fail("ncclCommSplit returned " + resultName(split));
    if (ctx.rank == 4) {
      if (child != nullptr) log.add("NCCL_SPLIT_NOCOLOR gave a communicator");
    } else {
      expectPlace(log, child, ctx.rank, 4, "child");
      std::string problem = allReduceGives(child, ctx.rank + 1, memberSum({0, 1, 2, 3}), "child");
      if (!problem.empty()) log.add(problem);
      // Child ranks {0, 1} and {2, 3}, ordered by key = -rank: reversed.
      ncclComm_t grandchild = nullptr;
      const ncclResult_t again = ncclCommSplit(child, ctx.rank / 2, -ctx.rank, &grandchild, nullptr);
      if (again != ncclSuccess) {
        log.add("splitting the child returned " + resultName(again));
      } else {
        expectPlace(log, grandchild, 1 - ctx.rank % 2, 2, "grandchild");
        const std::vector<int> pair = ctx.rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
        problem = allReduceGives(grandchild, ctx.rank + 1, memberSum(pair), "grandchild");
        if (!problem.empty()) log.add(problem);
        if (ncclCommDestroy(grandchild) != ncclSuccess) log.add("destroying the grandchild failed");
      }
      if (ncclCommDestroy(child) != ncclSuccess) log.add("destroying the child failed");
    }
    // The parent still works after its children are gone.
    const std::string problem = allReduceGives(ctx.comm, ctx.rank + 1, memberSum({0, 1, 2, 3, 4}), "parent");
    if (!problem.empty()) log.add(problem);
    return log.outcome();
  }));
}

INSTANTIATE_TEST_SUITE_P(Modes, CommSplitModes, testing::Values(LaunchMode::kThreads, LaunchMode::kProcesses),
                         [](const testing::TestParamInfo<LaunchMode>& info) { return launchModeName(info.param); });

// Several splits of one parent in one group: they run in call order on every rank.
TEST(CommSplit, TwoSplitsOfOneParentInOneGroup) {
  EXPECT_RANKS_OK(runAllRanksOneThread(3, [](std::span<const ncclComm_t> comms) {
    const int n = static_cast<int>(comms.size());
    std::vector<RankOutcome> outcomes(n);
    std::vector<ncclComm_t> whole(n, nullptr), halves(n, nullptr);
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      ncclCommSplit(comms[r], 0, 0, &whole[r], nullptr);
      ncclCommSplit(comms[r], r == 0 ? 0 : 1, 0, &halves[r], nullptr);
    }
    const ncclResult_t end = ncclGroupEnd();
    std::vector<std::vector<int32_t>> a(n), b(n);
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      a[r].assign(64, r + 1);
      b[r].assign(64, r + 1);
      ncclAllReduce(a[r].data(), a[r].data(), 64, ncclInt32, ncclSum, whole[r], nullptr);
      ncclAllReduce(b[r].data(), b[r].data(), 64, ncclInt32, ncclSum, halves[r], nullptr);
    }
    const ncclResult_t ran = ncclGroupEnd();
    for (int r = 0; r < n; ++r) {
      FailureLog log;
      if (end != ncclSuccess || ran != ncclSuccess)
        log.add("groups returned " + resultName(end) + " and " + resultName(ran));
      expectPlace(log, whole[r], r, 3, "whole");
      expectPlace(log, halves[r], r == 0 ? 0 : r - 1, r == 0 ? 1 : 2, "half");
      if (a[r][63] != memberSum({0, 1, 2})) log.add("whole AllReduce gave " + std::to_string(a[r][63]));
      const int32_t half = r == 0 ? memberSum({0}) : memberSum({1, 2});
      if (b[r][0] != half) log.add("half AllReduce gave " + std::to_string(b[r][0]));
      if (!log.empty()) outcomes[r] = log.outcome();
    }
    for (int r = 0; r < n; ++r) {
      if (whole[r]) ncclCommDestroy(whole[r]);
      if (halves[r]) ncclCommDestroy(halves[r]);
    }
    return outcomes;
  }));
}

// A non-blocking parent: the split is the parent's work (the call returns ncclSuccess, as
// NCCL's does, and the child is ready once the parent has settled); children inherit
// non-blocking unless their config says otherwise.
TEST(CommSplit, NonBlockingParentAndConfigInheritance) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t parent = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&parent, nranks, id, rank, &config);
    if ((init != ncclSuccess && init != ncclInProgress) || waitWhileInProgress(parent) != ncclSuccess)
      return RankOutcome::fail("non-blocking init failed: " + resultName(init));

    ncclComm_t inherited = nullptr;
    const ncclResult_t split = ncclCommSplit(parent, 0, rank, &inherited, nullptr);
    if (split != ncclSuccess) log.add("a split inheriting non-blocking returned " + resultName(split));
    if (waitWhileInProgress(parent) != ncclSuccess) log.add("the parent did not leave ncclInProgress");
    if (inherited == nullptr) return RankOutcome::fail("no child communicator");
    ncclResult_t ready = ncclInternalError;
    if (ncclCommGetAsyncError(inherited, &ready) != ncclSuccess || ready != ncclSuccess)
      log.add("the inherited child was not ready once the parent settled: " + resultName(ready));

    ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
    blocking.blocking = 1;
    ncclComm_t blockingChild = nullptr;
    const ncclResult_t split2 = ncclCommSplit(parent, 0, rank, &blockingChild, &blocking);
    if (split2 != ncclSuccess) log.add("a split with a blocking config returned " + resultName(split2));
    if (waitWhileInProgress(parent) != ncclSuccess) log.add("the parent did not settle after the second split");
    ncclResult_t state = ncclInternalError;
    if (blockingChild == nullptr || ncclCommGetAsyncError(blockingChild, &state) != ncclSuccess ||
        state != ncclSuccess) {
      log.add("the blocking child was not ready once the parent settled: " + resultName(state));
    } else {
      const std::string problem = allReduceGives(blockingChild, rank + 1, memberSum({0, 1, 2}), "blocking child");
      if (!problem.empty()) log.add(problem);
    }
    waitWhileInProgress(parent);

    std::vector<int32_t> data(100, rank + 1);
    const ncclResult_t issued = ncclAllReduce(data.data(), data.data(), 100, ncclInt32, ncclSum, inherited, nullptr);
    if (issued != ncclSuccess && issued != ncclInProgress) log.add("child AllReduce returned " + resultName(issued));
    if (waitWhileInProgress(inherited) != ncclSuccess) log.add("child AllReduce did not complete");
    if (data[99] != memberSum({0, 1, 2})) log.add("non-blocking child AllReduce gave " + std::to_string(data[99]));

    if (blockingChild) ncclCommDestroy(blockingChild);
    ncclCommDestroy(inherited);
    ncclCommDestroy(parent);
    return log.outcome();
  }));
}

TEST(CommSplit, RefusesBadArguments) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  // Only NCCL_SPLIT_NOCOLOR is special; -2 is an ordinary color (as NCCL).
  ASSERT_EQ(ncclCommSplit(comm, -2, 0, &child, nullptr), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(child, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  ncclCommDestroy(child);
  child = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommSplit(nullptr, 0, 0, &child, nullptr), ncclInvalidArgument);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0x1234;
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, &child, &config), ncclInvalidArgument);
  EXPECT_EQ(child, nullptr);
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 5;
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, &child, &config), ncclInvalidArgument);
  // A split of one rank still works after the refusals.
  ASSERT_EQ(ncclCommSplit(comm, 3, 0, &child, nullptr), ncclSuccess);
  EXPECT_EQ(allReduceGives(child, 5, 5, "single-rank child"), "");
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A rank that aborts its parent instead of joining a split: the rank after it on the
// bootstrap ring fails at once, and closes the ring on to the next, so every rank's split
// fails promptly (the last one waited for CHORUS_BOOTSTRAP_TIMEOUT, 300 s, and ran into
// this test's bound).
TEST(CommSplit, ARankAbortingInsteadOfSplittingFailsEveryRanksSplit) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  std::vector<ncclResult_t> results(n, ncclSuccess);
  std::vector<std::thread> splitters;
  for (int r = 1; r < n; ++r) {
    splitters.emplace_back([&, r] {
      ncclComm_t child = nullptr;
      results[r] = ncclCommSplit(comms[r], 0, r, &child, nullptr);
      if (child != nullptr) ncclCommDestroy(child);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  const auto bound = Clock::now() + std::chrono::seconds(60);  // the timeout is 300 s
  for (std::thread& t : splitters) t.join();
  EXPECT_LT(Clock::now(), bound) << "a rank's split waited for the bootstrap timeout";
  for (int r = 1; r < n; ++r) EXPECT_NE(results[r], ncclSuccess) << "rank " << r;
  for (int r = 1; r < n; ++r) ncclCommDestroy(comms[r]);
}

TEST(CommShrink, DefaultRenumbersTheSurvivors) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 4, [](const RankContext& ctx) {
    if (ctx.rank == 1) return RankOutcome::pass();  // excluded: takes no part
    FailureLog log;
    int excluded[] = {1};
    ncclComm_t child = nullptr;
    const ncclResult_t r = ncclCommShrink(ctx.comm, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT);
    if (r != ncclSuccess) return RankOutcome::fail("ncclCommShrink returned " + resultName(r));
    expectPlace(log, child, ctx.rank == 0 ? 0 : ctx.rank - 1, 3, "shrunk");
    const std::string problem = allReduceGives(child, ctx.rank + 1, memberSum({0, 2, 3}), "shrunk");
    if (!problem.empty()) log.add(problem);
    if (ncclCommDestroy(child) != ncclSuccess) log.add("destroying the shrunk communicator failed");
    return log.outcome();
  }));
}

// Rank 2 is SIGKILLed; the others see their AllReduce fail, cannot shrink the failed
// communicator by default, and can with NCCL_SHRINK_ABORT.
TEST(CommShrink, AbortPastASigkilledRank) {
  constexpr int kVictim = 2;
  LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, 3,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> values(1 << 16, 1.0f);
        for (int call = 0;; ++call) {
          if (rank == kVictim && call == 3) raise(SIGKILL);
          const ncclResult_t r =
              ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr);
          if (r != ncclSuccess) break;
          if (call > 1000) return RankOutcome::fail("no error 1000 calls after the death");
        }
        FailureLog log;
        int excluded[] = {kVictim};
        ncclComm_t child = nullptr;
        const ncclResult_t refused = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT);
        if (refused == ncclSuccess || child != nullptr)
          log.add("a default shrink of the failed communicator returned " + resultName(refused));
        const ncclResult_t r = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_ABORT);
        if (r != ncclSuccess) return RankOutcome::fail("NCCL_SHRINK_ABORT returned " + resultName(r));
        expectPlace(log, child, rank, 2, "shrunk");
        const std::string problem = allReduceGives(child, rank + 1, memberSum({0, 1}), "shrunk");
        if (!problem.empty()) log.add(problem);
        ncclCommDestroy(child);
        ncclCommAbort(comm);
        return log.outcome();
      },
      std::chrono::seconds(90));
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_FALSE(result.ranks[kVictim].ok) << "the victim was expected to die";
  for (int rank : {0, 1}) EXPECT_TRUE(result.ranks[rank].ok) << "rank " << rank << ": " << result.ranks[rank].message;
}

// Rank 2 stays silent while ranks 0 and 1 have a non-blocking AllReduce waiting for it:
// NCCL_SHRINK_ABORT stops that work and makes a communicator of the two.
TEST(CommShrink, AbortStopsWorkStuckOnASilentRank) {
  static std::atomic<int> survivorsDone{0};
  static std::atomic<int> survivorsChecked{0};
  survivorsDone = 0;
  survivorsChecked = 0;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if ((init != ncclSuccess && init != ncclInProgress) || waitWhileInProgress(comm) != ncclSuccess)
      return RankOutcome::fail("non-blocking init failed");
    if (rank == 2) return staySilentUntil(survivorsDone, 2, comm);
    FailureLog log;
    std::vector<int32_t> stuck(4096, 1);
    const ncclResult_t issued =
        ncclAllReduce(stuck.data(), stuck.data(), stuck.size(), ncclInt32, ncclSum, comm, nullptr);
    if (issued != ncclInProgress && issued != ncclSuccess)
      log.add("the stuck AllReduce returned " + resultName(issued));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm, &state);
    if (state != ncclInProgress) log.add("the AllReduce waiting for a silent rank reads " + resultName(state));
    // Both survivors look before either shrinks: a shrink's revoke breaks the connections,
    // and the other survivor's AllReduce then fails (rightly) before its own look.
    ++survivorsChecked;
    while (survivorsChecked.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int excluded[] = {2};
    ncclComm_t child = nullptr;
    const auto start = Clock::now();
    const ncclResult_t r = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_ABORT);
    if ((r != ncclSuccess && r != ncclInProgress) || child == nullptr) {
      log.add("NCCL_SHRINK_ABORT returned " + resultName(r));
    } else if (waitWhileInProgress(child) != ncclSuccess) {
      log.add("the shrunk communicator did not become ready");
    } else {
      if (std::chrono::duration<double>(Clock::now() - start).count() > 10) log.add("the shrink took over 10 s");
      std::vector<int32_t> data(333, rank + 1);
      ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, child, nullptr);
      if (waitWhileInProgress(child) != ncclSuccess || data[332] != memberSum({0, 1}))
        log.add("the shrunk AllReduce gave " + std::to_string(data[332]));
      ncclCommDestroy(child);
    }
    ++survivorsDone;
    ncclCommAbort(comm);
    return log.outcome();
  }));
}

TEST(CommShrink, RefusesBadArguments) {
  std::vector<ncclComm_t> comms(3, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 3, nullptr), ncclSuccess);
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  int self[] = {0};
  EXPECT_EQ(ncclCommShrink(comms[0], self, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(child, nullptr);
  int outside[] = {5};
  EXPECT_EQ(ncclCommShrink(comms[0], outside, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  int twice[] = {1, 1};
  EXPECT_EQ(ncclCommShrink(comms[0], twice, 2, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("listed twice"), std::string::npos);
  int all[] = {1, 2, 0};
  EXPECT_EQ(ncclCommShrink(comms[0], all, 3, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(comms[0], nullptr, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  int two[] = {2};
  EXPECT_EQ(ncclCommShrink(comms[0], two, 1, &child, nullptr, 0x4), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(comms[0], two, 1, nullptr, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0x1;
  EXPECT_EQ(ncclCommShrink(comms[0], two, 1, &child, &bad, NCCL_SHRINK_ABORT), ncclInvalidArgument);
  EXPECT_EQ(groupAllReduceGives(comms, 6), "") << "a refused NCCL_SHRINK_ABORT must leave the parent's work alone";
  // Ranks 0 and 1 still shrink past rank 2 after the refusals.
  std::vector<ncclComm_t> shrunk(2, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommShrink(comms[r], two, 1, &shrunk[r], nullptr, NCCL_SHRINK_DEFAULT);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(groupAllReduceGives(shrunk, 3), "");
  for (ncclComm_t c : shrunk) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A revoked communicator refuses collectives, reads healthy, and can still be split.
TEST(CommRevoke, RefusesCollectivesAndStillSplits) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(comms[0], 3), ncclInvalidArgument);
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclSuccess);
  ncclResult_t state = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comms[0], &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  std::vector<int32_t> data(8, 1);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), 8, ncclInt32, ncclSum, comms[0], nullptr), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("revoked"), std::string::npos) << ncclGetLastError(comms[0]);
  EXPECT_EQ(ncclCommFinalize(comms[1]), ncclInvalidArgument) << "finalize after revoke is invalid (NCCL)";
  std::vector<ncclComm_t> children(2, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclCommSplit(comms[r], 0, 0, &children[r], nullptr);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(groupAllReduceGives(children, 3), "");
  for (ncclComm_t c : children) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A first send to a silent rank waits for that rank's half of the connection (over the
// bootstrap, whose timeout is minutes); a revoke from another thread ends it at once, and the
// revoked communicator can still be shrunk past the silent rank.
TEST(CommRevoke, EndsAConnectionWaitForASilentRank) {
  static std::atomic<int> survivorsDone{0};
  survivorsDone = 0;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init");
    if (rank == 2) return staySilentUntil(survivorsDone, 2, comm);
    FailureLog log;
    std::thread revoker([comm, &log] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const auto start = Clock::now();
      if (ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) != ncclSuccess) log.add("revoke failed");
      if (std::chrono::duration<double>(Clock::now() - start).count() > 10) log.add("the revoke took over 10 s");
    });
    std::vector<int32_t> data(64, rank);
    const auto start = Clock::now();
    const ncclResult_t sent = ncclSend(data.data(), data.size(), ncclInt32, 2, comm, nullptr);
    revoker.join();
    if (sent == ncclSuccess) log.add("the send to a silent rank succeeded");
    if (std::chrono::duration<double>(Clock::now() - start).count() > 10) log.add("the send took over 10 s");
    int excluded[] = {2};
    ncclComm_t child = nullptr;
    if (ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT) != ncclSuccess || child == nullptr) {
      log.add("shrinking the revoked communicator failed: " + std::string(ncclGetLastError(comm)));
    } else {
      checkSurvivorsAllReduce(child, rank, log);
    }
    ++survivorsDone;
    ncclCommDestroy(comm);
    return log.outcome();
  }));
}

// A blocking call stuck on a silent rank holds its thread (the CPU executor runs it there),
// so NCCL_SHRINK_ABORT comes from another thread: it stops the call, waits for the stuck
// thread to let go of the communicator, and shrinks past the silent rank.
TEST(CommShrink, AbortFromAnotherThreadStopsABlockingCallStuckOnASilentRank) {
  static std::atomic<int> survivorsDone{0};
  survivorsDone = 0;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init");
    if (rank == 2) return staySilentUntil(survivorsDone, 2, comm);
    FailureLog log;
    std::vector<int32_t> stuck(4096, 1);
    ncclResult_t stuckResult = ncclSuccess;
    std::thread caller([&] {
      stuckResult = ncclAllReduce(stuck.data(), stuck.data(), stuck.size(), ncclInt32, ncclSum, comm, nullptr);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the AllReduce waits for rank 2 by now
    int excluded[] = {2};
    ncclComm_t child = nullptr;
    const auto start = Clock::now();
    const ncclResult_t r = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_ABORT);
    caller.join();
    if (stuckResult == ncclSuccess) log.add("the AllReduce waiting for a silent rank succeeded");
    if (r != ncclSuccess || child == nullptr) {
      log.add("NCCL_SHRINK_ABORT from another thread returned " + resultName(r) + ": " + ncclGetLastError(comm));
    } else {
      if (std::chrono::duration<double>(Clock::now() - start).count() > 10) log.add("the shrink took over 10 s");
      checkSurvivorsAllReduce(child, rank, log);
    }
    ++survivorsDone;
    ncclCommDestroy(comm);
    return log.outcome();
  }));
}

}  // namespace
}  // namespace chorus_test
