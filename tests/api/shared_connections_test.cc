// splitShare and shrinkShare (src/comm/shared_connections.h), through the public API:
//  - a child asking for it runs its collectives over its parent's ring and tree connections
//    (its INFO line per connection says so; without it no line does), and every result is
//    exact: children over all ranks and over half of them, interleaved with the parent,
//    small and multi-step sizes, then after the parent was destroyed, over P2P, SHM and NET;
//  - a shrink with shrinkShare shares too, and sums right over the survivors;
//  - ranks running parent and child calls in different orders fail with a WARN naming the
//    other communicator, instead of reducing each other's data (both calls are "#1");
//  - one group with collectives of a parent and its sharing child, called in a different
//    order on each rank, runs them in turn in one order (blocking or not); the child's sends
//    and receives join the parent's collective;
//  - non-blocking parent and child, their calls handed over back to back: each worker
//    waits for its turn in the order the calls were made, and both sums are exact.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/failure_log.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr const char* kSharedLine = "(shared with the parent communicator)";

ncclConfig_t sharingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.splitShare = 1;
  config.shrinkShare = 1;
  return config;
}

// An int32 AllReduce of `count` elements of `value`; "" when each element is `want`.
std::string sumIs(ncclComm_t comm, size_t count, int32_t value, int32_t want, const std::string& what) {
  std::vector<int32_t> data(count, value);
  const ncclResult_t r = ncclAllReduce(data.data(), data.data(), count, ncclInt32, ncclSum, comm, nullptr);
  if (r != ncclSuccess) return what + ": AllReduce returned " + resultName(r);
  for (size_t i = 0; i < count; ++i)
    if (data[i] != want)
      return what + ": element " + std::to_string(i) + " of " + std::to_string(count) + " is " +
             std::to_string(data[i]) + ", expected " + std::to_string(want);
  return "";
}

void addIf(FailureLog& log, std::string problem) {
  if (!problem.empty()) log.add(std::move(problem));
}

int sharedLines(const TuningLogCapture& log) {
  int n = 0;
  for (const std::string& line : log.lines()) n += line.find(kSharedLine) != std::string::npos;
  return n;
}

class SplitShareLinks : public testing::TestWithParam<Link> {};

TEST_P(SplitShareLinks, ChildrenRunOnTheParentsConnections) {
  ScopedEnv env;
  forceLink(env, GetParam());
  TuningLogCapture log(env, "INIT");
  constexpr int kRanks = 4;
  EXPECT_RANKS_OK(runRanksWithId(launchModeOf(GetParam()), kRanks, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog failures;
    ncclComm_t parent = nullptr, whole = nullptr, half = nullptr;
    if (ncclCommInitRank(&parent, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
    ncclConfig_t config = sharingConfig();
    if (ncclCommSplit(parent, 0, rank, &whole, &config) != ncclSuccess ||
        ncclCommSplit(parent, rank % 2, rank, &half, &config) != ncclSuccess) {
      ncclCommAbort(parent);
      return RankOutcome::fail("a split failed");
    }
    // Each rank gives rank + 1: the whole sums to 10, the halves to 1 + 3 and 2 + 4.
    const int32_t halfSum = rank % 2 == 0 ? 4 : 6;
    for (int round = 0; round < 3; ++round) {
      for (size_t count : {size_t{1031}, size_t{3} << 20}) {  // one step; many steps over every channel
        addIf(failures, sumIs(parent, count, rank + 1, 10, "parent"));
        addIf(failures, sumIs(whole, count, rank + 1, 10, "whole child"));
        addIf(failures, sumIs(half, count, rank + 1, halfSum, "half child"));
        addIf(failures, sumIs(whole, count, rank + 1, 10, "whole child again"));
      }
    }
    // The children keep the connections they borrowed after the parent is gone.
    if (ncclCommDestroy(parent) != ncclSuccess) failures.add("destroying the parent failed");
    addIf(failures, sumIs(whole, 4099, rank + 1, 10, "whole child after the parent's destroy"));
    addIf(failures, sumIs(half, 4099, rank + 1, halfSum, "half child after the parent's destroy"));
    if (ncclCommDestroy(half) != ncclSuccess) failures.add("destroying the half child failed");
    addIf(failures, sumIs(whole, 4099, rank + 1, 10, "whole child, alone"));
    if (ncclCommDestroy(whole) != ncclSuccess) failures.add("destroying the whole child failed");
    return failures.outcome();
  }));
  // The whole child shares every connection: each rank sends on at least its ring's.
  EXPECT_GE(sharedLines(log), kRanks);
}

INSTANTIATE_TEST_SUITE_P(Links, SplitShareLinks, testing::Values(Link::kP2p, Link::kShm, Link::kNet),
                         [](const testing::TestParamInfo<Link>& info) { return linkName(info.param); });

// Without splitShare a child makes connections of its own.
TEST(SplitShare, NotWhereNotAskedFor) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 3, [](const RankContext& ctx) {
    FailureLog failures;
    ncclComm_t own = nullptr;
    if (ncclCommSplit(ctx.comm, 0, ctx.rank, &own, nullptr) != ncclSuccess) return RankOutcome::fail("split failed");
    addIf(failures, sumIs(own, 1031, ctx.rank + 1, 6, "unshared child"));
    ncclCommDestroy(own);
    return failures.outcome();
  }));
  EXPECT_EQ(sharedLines(log), 0);
}

// With shrinkShare a shrink shares the connections between survivors.
TEST(SplitShare, ShrinkShareShares) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 4, [](const RankContext& ctx) {
    if (ctx.rank == 3) return RankOutcome::pass();  // excluded: makes no call
    FailureLog failures;
    ncclConfig_t config = sharingConfig();
    int excluded[] = {3};
    ncclComm_t shrunk = nullptr;
    if (ncclCommShrink(ctx.comm, excluded, 1, &shrunk, &config, NCCL_SHRINK_DEFAULT) != ncclSuccess)
      return RankOutcome::fail("shrink failed");
    addIf(failures, sumIs(shrunk, 1031, ctx.rank + 1, 6, "shrunk"));
    addIf(failures, sumIs(shrunk, 1 << 20, ctx.rank + 1, 6, "shrunk, many steps"));
    ncclCommDestroy(shrunk);
    return failures.outcome();
  }));
  EXPECT_GT(sharedLines(log), 0);
}

// From one thread, every rank's parent and sharing child.
struct Family {
  std::vector<ncclComm_t> parents, children;
};

std::vector<RankOutcome> withFamily(std::span<const ncclComm_t> comms,
                                    const std::function<std::vector<std::string>(const Family&)>& body) {
  const int n = static_cast<int>(comms.size());
  Family f{std::vector<ncclComm_t>(comms.begin(), comms.end()), std::vector<ncclComm_t>(n, nullptr)};
  ncclConfig_t config = sharingConfig();
  ncclGroupStart();
  for (int r = 0; r < n; ++r) ncclCommSplit(f.parents[r], 0, r, &f.children[r], &config);
  const ncclResult_t split = ncclGroupEnd();
  std::vector<RankOutcome> outcomes(n);
  if (split != ncclSuccess) {
    outcomes[0] = RankOutcome::fail("the splits returned " + resultName(split));
    return outcomes;
  }
  const std::vector<std::string> problems = body(f);
  for (int r = 0; r < n; ++r) {
    if (!problems[r].empty()) outcomes[r] = RankOutcome::fail(problems[r]);
    ncclCommAbort(f.children[r]);
  }
  return outcomes;
}

// Ranks 0 and 1 run the child's AllReduce while ranks 2 and 3 run the parent's, the same
// call (#1 of each) on the same connections: without a tag per communicator the steps
// would match and the sums silently mix.
TEST(SplitShare, CallsInADifferentOrderFailInsteadOfMixing) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "60");
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runAllRanksOneThread(4, [](std::span<const ncclComm_t> comms) {
    return withFamily(comms, [](const Family& f) {
      std::vector<std::vector<int32_t>> data(4, std::vector<int32_t>(1031));
      ncclGroupStart();
      for (int r = 0; r < 4; ++r) {
        data[r].assign(1031, r + 1);
        ncclAllReduce(data[r].data(), data[r].data(), 1031, ncclInt32, ncclSum, r < 2 ? f.children[r] : f.parents[r],
                      nullptr);
      }
      const ncclResult_t end = ncclGroupEnd();
      std::vector<std::string> problems(4);
      if (end == ncclSuccess)
        problems[0] = "the mixed-up calls returned ncclSuccess (rank 0 got " + std::to_string(data[0][0]) + ")";
      return problems;
    });
  }));
  bool named = false;
  for (const std::string& line : log.lines())
    named = named || line.find("of another communicator sharing this connection") != std::string::npos;
  EXPECT_TRUE(named) << "no WARN names the other communicator's call";
}

// One group with collectives of a parent and its sharing child, the calls made in a
// different order on each rank: they run one after the other, in the same order on every
// rank (the parent first), so each sum is exact; the same buffer passes through both.
TEST(SplitShare, OneGroupOfParentAndChildRunsThemInTurn) {
  EXPECT_RANKS_OK(runAllRanksOneThread(3, [](std::span<const ncclComm_t> comms) {
    return withFamily(comms, [](const Family& f) {
      std::vector<std::vector<int32_t>> data(3, std::vector<int32_t>(4099, 1)), other(3);
      std::vector<std::string> problems(3);
      ncclGroupStart();
      for (int r = 0; r < 3; ++r) {
        other[r].assign(4099, r + 1);
        const bool childFirst = r % 2 == 1;
        for (ncclComm_t c : {childFirst ? f.children[r] : f.parents[r], childFirst ? f.parents[r] : f.children[r]})
          ncclAllReduce(data[r].data(), data[r].data(), data[r].size(), ncclInt32, ncclSum, c, nullptr);
        ncclAllReduce(other[r].data(), other[r].data(), other[r].size(), ncclInt32, ncclSum, f.children[r], nullptr);
      }
      const ncclResult_t end = ncclGroupEnd();
      for (int r = 0; r < 3; ++r) {
        if (end != ncclSuccess) problems[r] = "the group returned " + resultName(end);
        // 1 on every rank, summed twice over three ranks; the other buffer's 1 + 2 + 3.
        if (data[r][4098] != 9 || other[r][0] != 6)
          problems[r] =
              "sums " + std::to_string(data[r][4098]) + " and " + std::to_string(other[r][0]) + ", expected 9 and 6";
      }
      return problems;
    });
  }));
}

// An abort of a sharing child marks the connections it used broken, its parent's too (a
// peer waiting on one fails at once): a split of the parent asking to share then gets
// connections of its own, which work.
TEST(SplitShare, AChildsAbortMarksTheParentsConnectionsAndALaterSplitSharesNone) {
  ScopedEnv env;
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runAllRanksOneThread(3, [](std::span<const ncclComm_t> comms) {
    std::vector<RankOutcome> outcomes(3);
    std::vector<ncclComm_t> parents(comms.begin(), comms.end()), children(3, nullptr), again(3, nullptr);
    ncclConfig_t config = sharingConfig();
    ncclGroupStart();
    for (int r = 0; r < 3; ++r) ncclCommSplit(parents[r], 0, r, &children[r], &config);
    if (ncclGroupEnd() != ncclSuccess) outcomes[0] = RankOutcome::fail("the first splits failed");
    for (ncclComm_t c : children) ncclCommAbort(c);
    ncclGroupStart();
    for (int r = 0; r < 3; ++r) ncclCommSplit(parents[r], 0, r, &again[r], &config);
    if (ncclGroupEnd() != ncclSuccess) outcomes[0] = RankOutcome::fail("the splits after the abort failed");
    std::vector<std::vector<int32_t>> data(3);
    ncclGroupStart();
    for (int r = 0; r < 3; ++r) {
      data[r].assign(1031, r + 1);
      ncclAllReduce(data[r].data(), data[r].data(), 1031, ncclInt32, ncclSum, again[r], nullptr);
    }
    const ncclResult_t ran = ncclGroupEnd();
    for (int r = 0; r < 3; ++r)
      if (ran != ncclSuccess || data[r][1030] != 6)
        outcomes[r] = RankOutcome::fail("the new child's AllReduce returned " + resultName(ran) + " and " +
                                        std::to_string(data[r][1030]));
    for (ncclComm_t c : again) ncclCommDestroy(c);
    return outcomes;
  }));
  bool refused = false;
  for (const std::string& line : log.lines())
    refused = refused ||
              line.find("connections not shared with the parent communicator: its connection") != std::string::npos;
  EXPECT_TRUE(refused) << "the split after the abort shared broken connections";
}

ncclResult_t settle(ncclComm_t comm) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    if (const ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state == ncclInProgress) std::this_thread::yield();
  }
  return state;
}

// Send/Recv move over each communicator's own connections: a group with a parent's
// AllReduce and its sharing child's sends and receives runs.
TEST(SplitShare, SendsAndReceivesOfAChildJoinAParentsCollective) {
  EXPECT_RANKS_OK(runAllRanksOneThread(3, [](std::span<const ncclComm_t> comms) {
    return withFamily(comms, [](const Family& f) {
      std::vector<std::vector<int32_t>> sum(3), out(3), in(3);
      std::vector<std::string> problems(3);
      ncclGroupStart();
      for (int r = 0; r < 3; ++r) {
        sum[r].assign(100, r + 1);
        out[r].assign(100, 10 * (r + 1));
        in[r].assign(100, 0);
        ncclAllReduce(sum[r].data(), sum[r].data(), 100, ncclInt32, ncclSum, f.parents[r], nullptr);
        ncclSend(out[r].data(), 100, ncclInt32, (r + 1) % 3, f.children[r], nullptr);
        ncclRecv(in[r].data(), 100, ncclInt32, (r + 2) % 3, f.children[r], nullptr);
      }
      const ncclResult_t end = ncclGroupEnd();
      for (int r = 0; r < 3; ++r) {
        if (end != ncclSuccess) problems[r] = "the group returned " + resultName(end);
        if (sum[r][99] != 6) problems[r] = "the AllReduce gave " + std::to_string(sum[r][99]);
        if (in[r][99] != 10 * ((r + 2) % 3 + 1))
          problems[r] = "rank " + std::to_string(r) + " received " + std::to_string(in[r][99]);
      }
      return problems;
    });
  }));
}

// A non-blocking parent and its sharing child, both settled; "" or what failed.
std::string nonBlockingFamily(int rank, int nranks, const ncclUniqueId& id, ncclComm_t* parent, ncclComm_t* child) {
  ncclConfig_t config = sharingConfig();
  config.blocking = 0;
  ncclCommInitRankConfig(parent, nranks, id, rank, &config);
  if (settle(*parent) != ncclSuccess) return "init failed";
  ncclCommSplit(*parent, 0, rank, child, &config);
  if (*child == nullptr || settle(*parent) != ncclSuccess || settle(*child) != ncclSuccess) {
    ncclCommAbort(*parent);
    return "split failed";
  }
  return "";
}

// Non-blocking parent and child in one group, the calls made in a different order on each
// rank: their workers take turns in the same order on every rank.
TEST(SplitShare, OneGroupOfNonBlockingParentAndChildRunsThemInTurn) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t parent = nullptr, child = nullptr;
    if (const std::string failed = nonBlockingFamily(rank, nranks, id, &parent, &child); !failed.empty())
      return RankOutcome::fail(failed);
    FailureLog failures;
    for (int round = 0; round < 10; ++round) {
      std::vector<int32_t> a(1 << 18, rank + 1), b(1 << 18, 10 * (rank + 1));
      ncclGroupStart();
      if (rank == 1) ncclAllReduce(b.data(), b.data(), b.size(), ncclInt32, ncclSum, child, nullptr);
      ncclAllReduce(a.data(), a.data(), a.size(), ncclInt32, ncclSum, parent, nullptr);
      if (rank == 0) ncclAllReduce(b.data(), b.data(), b.size(), ncclInt32, ncclSum, child, nullptr);
      ncclGroupEnd();
      const ncclResult_t p = settle(parent), c = settle(child);
      if (p != ncclSuccess || c != ncclSuccess || a.back() != 3 || b.back() != 30) {
        failures.add("round " + std::to_string(round) + ": " + resultName(p) + "/" + resultName(c) + ", sums " +
                     std::to_string(a.back()) + " and " + std::to_string(b.back()) + ", expected 3 and 30");
        break;
      }
    }
    ncclCommAbort(child);
    ncclCommAbort(parent);
    return failures.outcome();
  }));
}

// Non-blocking: each communicator's calls run on a worker of its own, so the child's could
// start before the parent's handed over first; the turns keep the order of the calls.
TEST(SplitShare, NonBlockingWorkersTakeTurnsInCallOrder) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog failures;
    ncclComm_t parent = nullptr, child = nullptr;
    if (const std::string failed = nonBlockingFamily(rank, nranks, id, &parent, &child); !failed.empty())
      return RankOutcome::fail(failed);
    for (int round = 0; round < 20; ++round) {
      const size_t count = round % 2 == 0 ? 1031 : (1 << 20);
      std::vector<int32_t> a(count, rank + 1), b(count, 10 * (rank + 1));
      ncclAllReduce(a.data(), a.data(), count, ncclInt32, ncclSum, parent, nullptr);
      ncclAllReduce(b.data(), b.data(), count, ncclInt32, ncclSum, child, nullptr);
      const ncclResult_t p = settle(parent), c = settle(child);
      if (p != ncclSuccess || c != ncclSuccess) {
        failures.add("round " + std::to_string(round) + ": parent " + resultName(p) + ", child " + resultName(c));
        break;
      }
      if (a[0] != 6 || a[count - 1] != 6 || b[0] != 60 || b[count - 1] != 60)
        failures.add("round " + std::to_string(round) + ": sums " + std::to_string(a[0]) + " and " +
                     std::to_string(b[0]) + ", expected 6 and 60");
    }
    ncclCommAbort(child);
    ncclCommAbort(parent);
    return failures.outcome();
  }));
}

}  // namespace
}  // namespace chorus_test
