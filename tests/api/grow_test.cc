// ncclCommGetUniqueId and ncclCommGrow (NCCL 2.29): existing ranks keep their ranks, new
// ranks join with the id an existing rank made; the parent is untouched. The existing
// ranks call first (as NCCL wants), each rank from its own thread.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace chorus_test {
namespace {

// The old rank of each member, all-gathered over the grown communicators.
std::vector<std::vector<int32_t>> gatheredOrder(const std::vector<ncclComm_t>& comms) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<int32_t>> in(n), out(n);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    in[r] = {100 + r};
    out[r].assign(n, -1);
    ncclAllGather(in[r].data(), out[r].data(), 1, ncclInt32, comms[r], nullptr);
  }
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  return out;
}

TEST(CommGetUniqueId, FreshPerCall) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  ncclUniqueId a, b;
  ASSERT_EQ(ncclCommGetUniqueId(comm, &a), ncclSuccess);
  ASSERT_EQ(ncclCommGetUniqueId(comm, &b), ncclSuccess);
  EXPECT_NE(memcmp(&a, &b, sizeof a), 0);
  EXPECT_EQ(ncclCommGetUniqueId(nullptr, &a), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetUniqueId(comm, nullptr), ncclInvalidArgument);
  ncclCommDestroy(comm);
}

TEST(CommGrow, OneRankAndANewOneBecomeTwo) {
  ncclComm_t one = nullptr;
  ASSERT_EQ(ncclCommInitAll(&one, 1, nullptr), ncclSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclCommGetUniqueId(one, &id), ncclSuccess);
  ncclComm_t g0 = nullptr, g1 = nullptr;
  auto existing = std::async(std::launch::async, [&] { return ncclCommGrow(one, 2, &id, -1, &g0, nullptr); });
  auto joiner = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return ncclCommGrow(nullptr, 2, &id, 1, &g1, nullptr);
  });
  ASSERT_EQ(existing.get(), ncclSuccess);
  ASSERT_EQ(joiner.get(), ncclSuccess);
  ASSERT_NE(g0, nullptr);
  ASSERT_NE(g1, nullptr);
  int n = 0, r = -1;
  EXPECT_EQ(ncclCommCount(g0, &n), ncclSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(ncclCommUserRank(g0, &r), ncclSuccess);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(ncclCommUserRank(g1, &r), ncclSuccess);
  EXPECT_EQ(r, 1);
  for (const auto& got : gatheredOrder({g0, g1})) EXPECT_EQ(got, (std::vector<int32_t>{100, 101}));
  EXPECT_EQ(ncclCommCount(one, &n), ncclSuccess);
  EXPECT_EQ(n, 1) << "the parent is untouched";
  std::vector<float> data(1000, 2.0f);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, one, nullptr), ncclSuccess)
      << "and still works";
  for (ncclComm_t c : {g0, g1, one}) ncclCommDestroy(c);
}

// From two ranks to three: the rank that made the id passes it, the other existing rank
// passes NULL and learns it from its parent.
TEST(CommGrow, TwoRanksGrowToThree) {
  std::vector<ncclComm_t> pair(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(pair.data(), 2, nullptr), ncclSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclCommGetUniqueId(pair[0], &id), ncclSuccess);
  std::vector<ncclComm_t> grown(3, nullptr);
  auto t0 = std::async(std::launch::async, [&] { return ncclCommGrow(pair[0], 3, &id, -1, &grown[0], nullptr); });
  auto t1 = std::async(std::launch::async, [&] { return ncclCommGrow(pair[1], 3, nullptr, -1, &grown[1], nullptr); });
  auto t2 = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return ncclCommGrow(nullptr, 3, &id, 2, &grown[2], nullptr);
  });
  ASSERT_EQ(t0.get(), ncclSuccess);
  ASSERT_EQ(t1.get(), ncclSuccess);
  ASSERT_EQ(t2.get(), ncclSuccess);
  for (const auto& got : gatheredOrder(grown)) EXPECT_EQ(got, (std::vector<int32_t>{100, 101, 102}));
  std::vector<std::vector<int64_t>> sums(3);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    sums[r].assign(4099, r + 1);
    ncclAllReduce(sums[r].data(), sums[r].data(), sums[r].size(), ncclInt64, ncclSum, grown[r], nullptr);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sums[r][4098], 6) << "rank " << r;
  for (ncclComm_t c : grown) ncclCommDestroy(c);
  for (ncclComm_t c : pair) ncclCommDestroy(c);
}

// Every refusal is local and leaves newcomm NULL.
TEST(CommGrow, RefusesBadArguments) {
  ncclComm_t one = nullptr;
  ASSERT_EQ(ncclCommInitAll(&one, 1, nullptr), ncclSuccess);
  ncclUniqueId id;
  ASSERT_EQ(ncclCommGetUniqueId(one, &id), ncclSuccess);
  ncclComm_t x = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommGrow(one, 1, &id, -1, &x, nullptr), ncclInvalidArgument) << "no larger than the communicator";
  EXPECT_EQ(x, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("nRanks 1"), std::string::npos);
  x = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommGrow(one, 2, &id, 3, &x, nullptr), ncclInvalidArgument) << "a rank given by an existing rank";
  EXPECT_EQ(x, nullptr);
  EXPECT_EQ(ncclCommGrow(one, 2, &id, -1, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGrow(nullptr, 2, nullptr, 1, &x, nullptr), ncclInvalidArgument) << "a new rank without the id";
  EXPECT_EQ(ncclCommGrow(nullptr, 2, &id, 5, &x, nullptr), ncclInvalidArgument) << "rank 5 of 2";
  EXPECT_EQ(ncclCommGrow(nullptr, 2, &id, -1, &x, nullptr), ncclInvalidArgument) << "a new rank needs a rank";
  EXPECT_EQ(x, nullptr);
  ncclCommDestroy(one);
}

// Existing ranks that all pass NULL have no id to join by: every one of them is told.
TEST(CommGrow, NoExistingRankPassedTheIdLeavesTheParentUsable) {
  std::vector<ncclComm_t> pair(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(pair.data(), 2, nullptr), ncclSuccess);
  std::vector<ncclComm_t> grown(2, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ncclCommGrow(pair[r], 3, nullptr, -1, &grown[r], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("no existing rank passed the id"), std::string::npos)
      << ncclGetLastError(nullptr);
  // The ranks disagreed after a complete exchange: the parent is still usable.
  std::vector<std::vector<int32_t>> in = {{1}, {2}}, out = {{0}, {0}};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclAllReduce(in[r].data(), out[r].data(), 1, ncclInt32, ncclSum, pair[r], nullptr);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(pair[0]);
  EXPECT_EQ(out[0][0], 3);
  EXPECT_EQ(out[1][0], 3);
  for (ncclComm_t c : grown) ncclCommDestroy(c);
  for (ncclComm_t c : pair) ncclCommDestroy(c);
}

}  // namespace
}  // namespace chorus_test
