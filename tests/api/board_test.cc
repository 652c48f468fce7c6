// The board (device/common/board.h): small AllReduce calls of ranks sharing one host's
// /dev/shm run in one hop on a block per rank.
//  - It is used where it should be (the INIT line on every rank) and not where it should
//    not: CHORUS_BOARD=0, NCCL_SHM_DISABLE=1.
//  - Its results are exact (int32 sums) and fold the ranks in deterministic mode's order
//    (float sums of order-sensitive values, checked bit for bit against ((x0 + x1) + x2)
//    ... computed here), in and out of place, up to its limit and just past it, where the
//    ring takes over; over many calls, so both slots of every block are reused.
//  - Ranks whose calls differ fail instead of mixing data, also when one rank's call runs
//    on the board and another's on the ring (a count on either side of the limit, or an
//    AllGather against an AllReduce), and the communicator stays failed; steps an earlier
//    call left unreceived on the ring (a Broadcast root disagreement) fail every rank's
//    next AllReduce on the board, as a ring call would.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "harness/links.h"
#include "harness/order_sensitive.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr size_t kBoardFloats = 4096 / sizeof(float);  // device/common/board.h: kBoardSlotBytes

int boardLines(const TuningLogCapture& log) {
  int n = 0;
  for (const std::string& line : log.lines()) n += line.find("run on the board") != std::string::npos;
  return n;
}

// One call of `count` elements; "" when the result is exact (int32) and bitwise the rank-
// order fold (float).
std::string checkedCall(const RankContext& rc, size_t count, bool inPlace, uint32_t seed) {
  std::vector<float> f(count), fOut(count);
  std::vector<int32_t> n(count), nOut(count);
  for (size_t i = 0; i < count; ++i) {
    f[i] = orderSensitiveValue<float>(rc.rank, i, seed);
    n[i] = static_cast<int32_t>(mixOf(rc.rank, i, seed) % 2000001) - 1000000;
  }
  float* fDst = inPlace ? f.data() : fOut.data();
  int32_t* nDst = inPlace ? n.data() : nOut.data();
  CHECK_NCCL(ncclAllReduce(f.data(), fDst, count, ncclFloat32, ncclSum, rc.comm, nullptr), "float AllReduce");
  CHECK_NCCL(ncclAllReduce(n.data(), nDst, count, ncclInt32, ncclSum, rc.comm, nullptr), "int32 AllReduce");
  const std::string what = std::to_string(count) + (inPlace ? " in place" : "");
  for (size_t i = 0; i < count; ++i) {
    float fold = orderSensitiveValue<float>(0, i, seed);
    int64_t sum = static_cast<int32_t>(mixOf(0, i, seed) % 2000001) - 1000000;
    for (int r = 1; r < rc.nranks; ++r) {
      fold = fold + orderSensitiveValue<float>(r, i, seed);
      sum += static_cast<int32_t>(mixOf(r, i, seed) % 2000001) - 1000000;
    }
    if (std::memcmp(&fDst[i], &fold, sizeof(float)) != 0)
      return what + ": float element " + std::to_string(i) + " is " + std::to_string(fDst[i]) +
             ", not the rank-order fold " + std::to_string(fold);
    if (nDst[i] != sum)
      return what + ": int32 element " + std::to_string(i) + " is " + std::to_string(nDst[i]) + ", expected " +
             std::to_string(sum);
  }
  return "";
}

class BoardTest : public testing::TestWithParam<int> {};

TEST_P(BoardTest, SmallAllReduceIsExactAndFoldsInRankOrder) {
  const int nranks = GetParam();
  ScopedEnv env;
  env.set("CHORUS_DETERMINISTIC", "1");  // the ring in rank order: the fold order this test computes
  forceLink(env, Link::kShm);
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanks(LaunchMode::kProcesses, nranks, [](const RankContext& rc) {
    uint32_t seed = 1;
    for (int round = 0; round < 3; ++round) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{64}, size_t{255}, kBoardFloats, kBoardFloats + 1}) {
        for (bool inPlace : {false, true}) {
          const std::string why = checkedCall(rc, count, inPlace, seed++);
          if (!why.empty()) return RankOutcome::fail(why);
        }
      }
    }
    return RankOutcome::pass();
  }));
  EXPECT_EQ(boardLines(log), nranks) << "every rank says its small AllReduce calls run on the board";
}

INSTANTIATE_TEST_SUITE_P(Ranks, BoardTest, testing::Values(3, 4, 5));

// Where the board is off the same calls run on the ring, with the same results: with
// CHORUS_BOARD=0 (on one rank only: every rank must agree), NCCL_SHM_DISABLE=1, or 2 ranks.
TEST(BoardOff, ByChorusBoardOrNcclShmDisableOrTwoRanks) {
  for (const char* setting : {"CHORUS_BOARD", "NCCL_SHM_DISABLE", ""}) {
    const std::string name = setting;
    ScopedEnv env;
    env.set("CHORUS_DETERMINISTIC", "1");
    forceLink(env, Link::kShm);
    if (name == "NCCL_SHM_DISABLE") env.set(setting, "1");
    TuningLogCapture log(env, "INIT");
    EXPECT_RANKS_OK(
        runRanksWithId(LaunchMode::kProcesses, name.empty() ? 2 : 3, [&](int rank, int nranks, const ncclUniqueId& id) {
          if (name == "CHORUS_BOARD" && rank == 1) setenv("CHORUS_BOARD", "0", 1);
          ncclComm_t comm = nullptr;
          if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
          const std::string why = checkedCall(RankContext{comm, rank, nranks}, 64, false, 7);
          ncclCommDestroy(comm);
          return why.empty() ? RankOutcome::pass() : RankOutcome::fail(why);
        }));
    EXPECT_EQ(boardLines(log), 0) << "a board with " << (name.empty() ? "2 ranks" : name + " set");
  }
}

enum class Mismatch { kCountAcrossLimit, kAllGather, kOp, kBroadcastRootOnOneRank, kBroadcastRootOnTwoChannels };

// Rank `rank`'s call: the last rank differs.
ncclResult_t mismatchedCall(Mismatch m, int rank, int nranks, ncclComm_t comm, std::vector<float>& a,
                            std::vector<float>& b) {
  const bool odd = rank == nranks - 1;
  switch (m) {
    case Mismatch::kCountAcrossLimit:  // the last rank's call is too large for the board: the ring
      return ncclAllReduce(a.data(), b.data(), odd ? 2 * kBoardFloats : kBoardFloats, ncclFloat32, ncclSum, comm,
                           nullptr);
    case Mismatch::kAllGather:
      return odd ? ncclAllGather(a.data(), b.data(), 16, ncclFloat32, comm, nullptr)
                 : ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, comm, nullptr);
    case Mismatch::kOp:
      return ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, odd ? ncclMax : ncclSum, comm, nullptr);
    case Mismatch::kBroadcastRootOnOneRank:  // the last rank calls itself the root: it and the rank
      // before it only send, and their steps stay unreceived (the calls themselves may succeed)
      return ncclBroadcast(a.data(), b.data(), 16, ncclFloat32, odd ? nranks - 1 : 0, comm, nullptr);
    case Mismatch::kBroadcastRootOnTwoChannels:  // the same, on both channels of the communicator
      return ncclBroadcast(a.data(), b.data(), 4 * kBoardFloats, ncclFloat32, odd ? nranks - 1 : 0, comm, nullptr);
  }
  return ncclInternalError;
}

class BoardMismatchTest : public testing::TestWithParam<Mismatch> {};

TEST_P(BoardMismatchTest, EveryRankFailsAndStaysFailed) {
  const Mismatch m = GetParam();
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "120");  // past the launcher's limit: only the call check may end a wait
  forceLink(env, Link::kShm);
  TuningLogCapture log(env, "INIT");
  // 4 ranks: with the root disagreement only the links into the last rank and into rank 0
  // hold steps left behind, and ranks 1 and 2 must still fail in the AllReduce after it.
  const bool roots = m == Mismatch::kBroadcastRootOnOneRank || m == Mismatch::kBroadcastRootOnTwoChannels;
  const int ranks = roots ? 4 : 3;
  if (m == Mismatch::kBroadcastRootOnTwoChannels) env.set("NCCL_MIN_NCHANNELS", "2");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, ranks,
      [m, roots](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> a(4 * kBoardFloats, 1.0f), b(4 * nranks * kBoardFloats, 0.0f);
        const ncclResult_t warmUp = ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, comm, nullptr);
        if (warmUp != ncclSuccess || b[0] != static_cast<float>(nranks)) {
          ncclCommAbort(comm);
          return RankOutcome::fail("the matched call before the mismatch failed: " + resultName(warmUp));
        }
        const ncclResult_t first = mismatchedCall(m, rank, nranks, comm, a, b);
        const ncclResult_t next = ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, comm, nullptr);
        ncclCommAbort(comm);
        if (first == ncclSuccess && !roots) return RankOutcome::fail("the mismatched call returned ncclSuccess");
        if (next == ncclSuccess) return RankOutcome::fail("the matched call after the mismatch returned ncclSuccess");
        return RankOutcome::pass();
      },
      std::chrono::seconds(60)));
  bool named = false;
  for (const std::string& line : log.lines()) named = named || line.find("calls do not match") != std::string::npos;
  EXPECT_TRUE(named) << "no WARN says the calls do not match";
  EXPECT_EQ(boardLines(log), ranks);
}

std::string mismatchName(const testing::TestParamInfo<Mismatch>& info) {
  static const char* const kNames[] = {"CountAcrossLimit", "AllGather", "Op", "BroadcastRootOnOneRank",
                                       "BroadcastRootOnTwoChannels"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Kinds, BoardMismatchTest,
                         testing::Values(Mismatch::kCountAcrossLimit, Mismatch::kAllGather, Mismatch::kOp,
                                         Mismatch::kBroadcastRootOnOneRank, Mismatch::kBroadcastRootOnTwoChannels),
                         mismatchName);

// One thread driving every rank (ncclCommInitAll and one group): when one rank's call fails
// (it ran on the ring and found the conflict), its lane marks the board broken at once, so
// the ranks waiting for its value on the board end now, not at CHORUS_TIMEOUT, which is set
// past the launcher's limit.
TEST(BoardOneThread, AFailedRankEndsTheOthersWaitsOnTheBoard) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "120");
  EXPECT_RANKS_OK(runAllRanksOneThread(
      3,
      [](std::span<const ncclComm_t> comms) {
        const int n = static_cast<int>(comms.size());
        std::vector<std::vector<float>> bufs(n, std::vector<float>(2 * kBoardFloats, 1.0f));
        ncclGroupStart();
        for (int r = 0; r < n; ++r) {
          const size_t count = r == n - 1 ? 2 * kBoardFloats : 16;  // the last rank's call runs on the ring
          ncclAllReduce(bufs[r].data(), bufs[r].data(), count, ncclFloat32, ncclSum, comms[r], nullptr);
        }
        const ncclResult_t end = ncclGroupEnd();
        std::vector<RankOutcome> out(n, RankOutcome::pass());
        if (end == ncclSuccess) out[0] = RankOutcome::fail("the group of mismatched calls returned ncclSuccess");
        return out;  // the launcher destroys the failed communicators
      },
      std::chrono::seconds(60)));
}

}  // namespace
}  // namespace chorus_test
