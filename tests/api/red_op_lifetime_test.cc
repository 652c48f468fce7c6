// A PreMulSum op may be destroyed as soon as the last call given it returns (nccl.h), and its
// handle then goes to the next op created: a call queued in a group, or running on a
// non-blocking communicator's worker, still uses the op as it was when the call was made.
// An op of another datatype is refused at the call, not when the group runs.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "harness/settle.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr int kRanks = 2;
constexpr size_t kCount = 1000;

// Every element of `values` equal to `expected`; the first that is not, named.
void expectAll(FailureLog& log, const char* what, const std::vector<float>& values, float expected) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      log.add(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(values[i]) +
              ", expected " + std::to_string(expected));
      return;
    }
  }
}

TEST(RedOpLifetime, AnOpDestroyedInsideTheGroupStillServesTheCallsMadeWithIt) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, kRanks, [](const RankContext& ctx) {
    FailureLog log;
    std::vector<float> first(kCount, static_cast<float>(ctx.rank + 1));
    std::vector<float> second(kCount, static_cast<float>(ctx.rank + 1));
    float three = 3, ten = 10;
    ncclRedOp_t timesThree, timesTen;
    ncclGroupStart();
    ncclRedOpCreatePreMulSum(&timesThree, &three, ncclFloat32, ncclScalarHostImmediate, ctx.comm);
    ncclAllReduce(first.data(), first.data(), kCount, ncclFloat32, timesThree, ctx.comm, nullptr);
    if (ncclResult_t r = ncclRedOpDestroy(timesThree, ctx.comm); r != ncclSuccess)
      log.add("ncclRedOpDestroy: " + resultName(r));
    // The freed handle is taken again: the first call must not pick up this op.
    ncclRedOpCreatePreMulSum(&timesTen, &ten, ncclFloat32, ncclScalarHostImmediate, ctx.comm);
    ncclAllReduce(second.data(), second.data(), kCount, ncclFloat32, timesTen, ctx.comm, nullptr);
    if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) log.add("ncclGroupEnd: " + resultName(r));
    expectAll(log, "times 3", first, 3.0f * (1 + 2));
    expectAll(log, "times 10", second, 10.0f * (1 + 2));
    ncclRedOpDestroy(timesTen, ctx.comm);
    return log.outcome();
  }));
}

TEST(RedOpLifetime, ANonBlockingCallKeepsItsOpDestroyedRightAfterIt) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, kRanks, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (ncclResult_t r = settle(comm); r != ncclSuccess)
      return RankOutcome::fail("non-blocking init: " + resultName(r));
    for (int round = 0; round < 20 && log.empty(); ++round) {
      std::vector<float> values(kCount, static_cast<float>(rank + 1));
      float scalar = static_cast<float>(round + 1);
      ncclRedOp_t op;
      ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm);
      const ncclResult_t called = ncclAllReduce(values.data(), values.data(), kCount, ncclFloat32, op, comm, nullptr);
      if (called != ncclSuccess && called != ncclInProgress) log.add("ncclAllReduce: " + resultName(called));
      if (ncclResult_t r = ncclRedOpDestroy(op, comm); r != ncclSuccess) log.add("ncclRedOpDestroy: " + resultName(r));
      if (ncclResult_t r = settle(comm); r != ncclSuccess) log.add("AllReduce: " + resultName(r));
      expectAll(log, "round", values, scalar * (1 + 2));
    }
    if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) log.add("ncclCommDestroy: " + resultName(r));
    return log.outcome();
  }));
}

TEST(RedOpLifetime, AnOpOfAnotherDatatypeIsRefusedAtTheCall) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 1, [](const RankContext& ctx) {
    FailureLog log;
    double scalar = 2;
    ncclRedOp_t forDoubles;
    ncclRedOpCreatePreMulSum(&forDoubles, &scalar, ncclFloat64, ncclScalarHostImmediate, ctx.comm);
    std::vector<float> values(4, 1.0f);
    ncclGroupStart();
    const ncclResult_t called =
        ncclAllReduce(values.data(), values.data(), 4, ncclFloat32, forDoubles, ctx.comm, nullptr);
    const ncclResult_t ended = ncclGroupEnd();
    if (called != ncclInvalidArgument) log.add("the call returned " + resultName(called));
    if (ended != ncclInvalidArgument) log.add("ncclGroupEnd returned " + resultName(ended));
    expectAll(log, "untouched", values, 1.0f);
    ncclRedOpDestroy(forDoubles, ctx.comm);
    return log.outcome();
  }));
}

}  // namespace
}  // namespace chorus_test
