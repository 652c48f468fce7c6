// ncclCommInitRankScalable with several ids: each id's root serves a block of the ranks
// (as NCCL spreads them), and the communicator is one, whatever the number of ids.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

struct ScalableCase {
  LaunchMode mode;
  int nranks;
  int nids;
};

class InitScalable : public testing::TestWithParam<ScalableCase> {};

// The ids are made here, before the ranks start (the launcher's own id is unused). Ranks
// are threads: forking after ncclGetUniqueId has started root threads would be unsafe.
TEST_P(InitScalable, RanksSpreadOverTheIdsFormOneCommunicator) {
  const ScalableCase c = GetParam();
  std::vector<ncclUniqueId> ids(c.nids);
  for (auto& id : ids) ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_RANKS_OK(runRanksWithId(c.mode, c.nranks, [&](int rank, int nranks, const ncclUniqueId&) {
    ncclComm_t comm = nullptr;
    const ncclResult_t init =
        ncclCommInitRankScalable(&comm, nranks, rank, static_cast<int>(ids.size()), ids.data(), nullptr);
    if (init != ncclSuccess) return RankOutcome::fail("init returned " + resultName(init));
    int count = 0, me = -1;
    ncclCommCount(comm, &count);
    ncclCommUserRank(comm, &me);
    std::vector<int32_t> order(nranks, -1);
    int32_t mine = 100 + rank;
    const ncclResult_t gathered = ncclAllGather(&mine, order.data(), 1, ncclInt32, comm, nullptr);
    std::vector<double> sum(5000, rank + 0.5);
    const ncclResult_t reduced = ncclAllReduce(sum.data(), sum.data(), sum.size(), ncclFloat64, ncclSum, comm, nullptr);
    ncclCommDestroy(comm);
    if (count != nranks || me != rank)
      return RankOutcome::fail("count/rank " + std::to_string(count) + "/" + std::to_string(me));
    if (gathered != ncclSuccess || reduced != ncclSuccess) return RankOutcome::fail("a collective failed");
    for (int r = 0; r < nranks; ++r)
      if (order[r] != 100 + r)
        return RankOutcome::fail("AllGather slot " + std::to_string(r) + " is " + std::to_string(order[r]));
    const double want = nranks * (nranks - 1) / 2.0 + nranks * 0.5;
    if (sum[4999] != want) return RankOutcome::fail("AllReduce gave " + std::to_string(sum[4999]));
    return RankOutcome::pass();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ids, InitScalable,
                         testing::Values(ScalableCase{LaunchMode::kThreads, 4, 2},
                                         ScalableCase{LaunchMode::kThreads, 5, 3},
                                         ScalableCase{LaunchMode::kThreads, 3, 3},
                                         ScalableCase{LaunchMode::kThreads, 2, 4}),
                         [](const testing::TestParamInfo<ScalableCase>& info) {
                           return std::string(launchModeName(info.param.mode)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks_" + std::to_string(info.param.nids) +
                                  "ids";
                         });

TEST(InitScalable, RefusesBadArguments) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t x = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRankScalable(&x, 1, 3, 1, &id, nullptr), ncclInvalidArgument) << "rank 3 of 1";
  EXPECT_EQ(x, nullptr);
  x = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRankScalable(&x, 2, 0, 0, &id, nullptr), ncclInvalidArgument) << "no ids";
  EXPECT_EQ(x, nullptr);
  EXPECT_EQ(ncclCommInitRankScalable(&x, 2, 0, 1, nullptr, nullptr), ncclInvalidArgument);
}

}  // namespace
}  // namespace chorus_test
