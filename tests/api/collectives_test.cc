// Every collective × data type × op × count × in/out of place against a host
// reference, on 1, 2, 3, 4 and 8 ranks as threads, as processes, and as one
// thread driving all ranks of ncclCommInitAll inside groups.
//
// One TEST per (launch mode, nranks, collective): communicators are created once
// and each test runs its whole slice of the matrix (hundreds of calls), which
// keeps the suite within its 10-minute budget on 2 cores.
//
// The full cross product runs, 1M+3 included: measured at 2 min 24 s for all 75
// slices with ctest -j2 on 2 cores (1 min 40 s when 1M+3 ran only sum and avg for
// every type plus every op for float32 and int32; CHORUS_TEST_REDUCED_MATRIX=1
// brings that reduced matrix back if the budget gets tight).
// Set CHORUS_TEST_MAX_COUNT=N to skip counts above N, for a quick loop while debugging.
//
// AllGather and ReduceScatter take a per-rank count; at the large size they use
// (1M+3)/nranks rounded to an odd number, so their whole buffer is 1M+3-sized as
// in nccl-tests (a literal 1M+3 per rank made the 8-rank ReduceScatter slice
// alone take 25 s on 2 cores, mostly filling and checking 8M-element buffers).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "harness/collective_case.h"
#include "harness/collective_matrix.h"
#include "harness/datatypes.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// kNetProcesses: processes forced onto the network transport (P2P and SHM disabled), so
// every connection runs through the proxy and the socket net.
enum class Driver { kThreads, kProcesses, kInitAllOneThread, kNetProcesses };

struct MatrixSlice {
  Driver driver;
  int nranks;
  Collective collective;
};

std::string describeSlice(const MatrixSlice& slice) {
  static const char* const kDriverNames[] = {"Threads", "Processes", "InitAllOneThread", "NetProcesses"};
  return std::string(kDriverNames[static_cast<int>(slice.driver)]) + "_" + std::to_string(slice.nranks) + "ranks_" +
         collectiveName(slice.collective);
}

std::string sliceName(const testing::TestParamInfo<MatrixSlice>& info) { return describeSlice(info.param); }

// gtest prints parameters in failure messages and ctest names; bytes say nothing.
void PrintTo(const MatrixSlice& slice, std::ostream* out) { *out << describeSlice(slice); }

// Each rank drives its own communicator through the whole case list.
LaunchResult runSliceOnRanks(LaunchMode mode, int nranks, const std::vector<CollectiveCase>& cases) {
  return runRanks(mode, nranks, [&](const RankContext& context) {
    CollectiveRankRunner runner(context.rank, context.nranks);
    FailureLog log;
    for (const CollectiveCase& testCase : cases) runner.run(testCase, context.comm, log);
    return log.outcome();
  });
}

// One thread issues every rank's call inside ncclGroupStart/End.
LaunchResult runSliceInGroups(int nranks, const std::vector<CollectiveCase>& cases) {
  return runAllRanksOneThread(nranks, [&](std::span<const ncclComm_t> comms) {
    std::vector<std::unique_ptr<CollectiveRankRunner>> runners;
    std::vector<FailureLog> logs(nranks);
    for (int rank = 0; rank < nranks; ++rank) runners.push_back(std::make_unique<CollectiveRankRunner>(rank, nranks));
    for (const CollectiveCase& testCase : cases) {
      for (int round = 0; round < roundsOf(testCase); ++round) {
        bool prepared = true;
        for (int rank = 0; rank < nranks; ++rank) {
          prepared = runners[rank]->prepare(testCase, round, comms[rank], logs[rank]) && prepared;
        }
        if (!prepared) break;
        std::vector<ncclResult_t> issued(nranks, ncclSuccess);
        ncclResult_t startResult = ncclGroupStart();
        for (int rank = 0; rank < nranks; ++rank) issued[rank] = runners[rank]->issue(testCase, comms[rank]);
        ncclResult_t endResult = ncclGroupEnd();
        for (int rank = 0; rank < nranks; ++rank) {
          if (startResult != ncclSuccess || endResult != ncclSuccess || issued[rank] != ncclSuccess) {
            logs[rank].add(std::string(collectiveName(testCase.collective)) + " " + traitsOf(testCase.type).name + " " +
                           opKindName(testCase.op) + " count=" + std::to_string(testCase.count) + ": GroupStart " +
                           resultName(startResult) + ", call " + resultName(issued[rank]) + ", GroupEnd " +
                           resultName(endResult));
            continue;
          }
          runners[rank]->verify(testCase, round, logs[rank]);
        }
      }
      for (int rank = 0; rank < nranks; ++rank) runners[rank]->finish(testCase, comms[rank], logs[rank]);
    }
    std::vector<RankOutcome> outcomes;
    for (const FailureLog& log : logs) outcomes.push_back(log.outcome());
    return outcomes;
  });
}

class CollectiveMatrixTest : public testing::TestWithParam<MatrixSlice> {};

TEST_P(CollectiveMatrixTest, MatchesHostReference) {
  const MatrixSlice& slice = GetParam();
  std::vector<CollectiveCase> cases = buildCases(slice.collective, slice.nranks);
  LaunchResult result;
  switch (slice.driver) {
    case Driver::kThreads:
      result = runSliceOnRanks(LaunchMode::kThreads, slice.nranks, cases);
      break;
    case Driver::kProcesses:
      result = runSliceOnRanks(LaunchMode::kProcesses, slice.nranks, cases);
      break;
    case Driver::kInitAllOneThread:
      result = runSliceInGroups(slice.nranks, cases);
      break;
    case Driver::kNetProcesses: {
      ScopedEnv env;  // set before the fork: the children inherit it
      forceLink(env, Link::kNet);
      result = runSliceOnRanks(LaunchMode::kProcesses, slice.nranks, cases);
      break;
    }
  }
  EXPECT_RANKS_OK(result);
}

std::vector<MatrixSlice> allSlices() {
  std::vector<MatrixSlice> slices;
  for (Driver driver : {Driver::kThreads, Driver::kProcesses, Driver::kInitAllOneThread}) {
    for (int nranks : {1, 2, 3, 4, 8}) {
      for (Collective collective : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                                    Collective::kBroadcast, Collective::kReduce}) {
        slices.push_back({driver, nranks, collective});
      }
    }
  }
  for (int nranks : {2, 3, 4}) {
    for (Collective collective : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                                  Collective::kBroadcast, Collective::kReduce}) {
      slices.push_back({Driver::kNetProcesses, nranks, collective});
    }
  }
  return slices;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CollectiveMatrixTest, testing::ValuesIn(allSlices()), sliceName);

// The matrix itself must cover what the issue asks for, or a passing run means little.
TEST(CollectiveMatrixCoverage, CoversEveryTypeOpCountAndPlacement) {
  std::vector<CollectiveCase> cases = buildCases(Collective::kReduce, 4);
  for (const DataTypeTraits& traits : allDataTypes()) {
    for (OpKind op : allOpKinds()) {
      for (size_t count : kCounts) {
        if (count == kLargeCount && !runsAtLargeCount(Collective::kReduce, traits.type, op)) continue;
        for (bool inPlace : {false, true}) {
          for (int root : {0, 3}) {
            bool found = false;
            for (const CollectiveCase& c : cases) {
              found |=
                  c.type == traits.type && c.op == op && c.count == count && c.inPlace == inPlace && c.root == root;
            }
            EXPECT_TRUE(found) << traits.name << " " << opKindName(op) << " count " << count;
          }
        }
      }
    }
  }
  EXPECT_EQ(allDataTypes().size(), 12u);
}

}  // namespace
}  // namespace chorus_test
