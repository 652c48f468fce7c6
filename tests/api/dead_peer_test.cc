// A rank that dies, and a rank that is stuck, on every transport that crosses processes
// (SHM, and NET forced with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE):
//  - one rank SIGKILLs itself in the middle of a stream of AllReduces: every other rank's
//    pending or next call returns ncclRemoteError or ncclSystemError well within 30 s
//    (the default limit the issue sets; CHORUS_TIMEOUT stays at its 600 s default, so
//    only the dead-peer detection can pass), and a WARN names a peer rank;
//  - one rank stops calling (stuck): another thread's ncclCommAbort returns within 5 s,
//    and the call blocked in the collective returns an error.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// The link, and CHORUS_TIMEOUT at its default of 600 s: only noticing the death can pass.
void forceLinkNoTimeout(ScopedEnv& env, Link link) {
  env.unset("CHORUS_TIMEOUT");
  forceLink(env, link);
}

bool isFailure(ncclResult_t r) { return r == ncclRemoteError || r == ncclSystemError; }

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr int kRanks = 3;
constexpr int kVictim = 1;
constexpr int kCallsBeforeDeath = 20;

class DeadPeerTest : public testing::TestWithParam<Link> {};

TEST_P(DeadPeerTest, EveryOtherRankFailsPromptlyAndAWarnNamesAPeer) {
  ScopedEnv env;
  forceLinkNoTimeout(env, GetParam());
  TuningLogCapture log(env, "INIT");  // WARN lines are logged whatever the subsystems
  LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, kRanks,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> values(1 << 18, 1.0f);  // 1 MiB: several steps per call
        for (int call = 0;; ++call) {
          if (rank == kVictim && call == kCallsBeforeDeath) raise(SIGKILL);
          const auto start = Clock::now();
          ncclResult_t r =
              ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr);
          const double took = secondsSince(start);
          if (r == ncclSuccess) {
            if (call > kCallsBeforeDeath + 1000) return RankOutcome::fail("no error 1000 calls after the death");
            continue;
          }
          if (!isFailure(r)) return RankOutcome::fail("call " + std::to_string(call) + " returned " + resultName(r));
          if (took > 30) return RankOutcome::fail("the failing call took " + std::to_string(took) + " s");
          ncclResult_t async = ncclSuccess;
          ncclCommGetAsyncError(comm, &async);
          if (!isFailure(async)) return RankOutcome::fail("ncclCommGetAsyncError reports " + resultName(async));
          const auto abortStart = Clock::now();
          ncclResult_t aborted = ncclCommAbort(comm);
          if (aborted != ncclSuccess) return RankOutcome::fail("ncclCommAbort returned " + resultName(aborted));
          if (secondsSince(abortStart) > 5) return RankOutcome::fail("ncclCommAbort took over 5 s");
          return RankOutcome::pass();
        }
      },
      std::chrono::seconds(60));
  ASSERT_EQ(result.ranks.size(), static_cast<size_t>(kRanks));
  EXPECT_FALSE(result.ranks[kVictim].ok) << "the victim was expected to die";
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kVictim) continue;
    EXPECT_TRUE(result.ranks[rank].ok) << "rank " << rank << ": " << result.ranks[rank].message;
  }
  int warnsNamingAPeer = 0;
  for (const std::string& line : log.lines()) {
    if (line.find("WARN") != std::string::npos && line.find("peer rank") != std::string::npos) ++warnsNamingAPeer;
  }
  EXPECT_GE(warnsNamingAPeer, kRanks - 1) << "every survivor should WARN naming the peer it lost";
}

TEST_P(DeadPeerTest, AbortFromAnotherThreadEndsACallStuckOnASilentPeer) {
  ScopedEnv env;
  forceLinkNoTimeout(env, GetParam());
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> values(1 << 16, 1.0f);
        if (rank == 1) {  // stuck: never joins the collective
          std::this_thread::sleep_for(std::chrono::seconds(3));
          ncclCommAbort(comm);
          return RankOutcome::pass();
        }
        std::atomic<double> abortSeconds{-1};
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          const auto start = Clock::now();
          ncclCommAbort(comm);
          abortSeconds = secondsSince(start);
        });
        const auto start = Clock::now();
        ncclResult_t r =
            ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr);
        const double took = secondsSince(start);
        aborter.join();
        if (r == ncclSuccess) return RankOutcome::fail("the call completed without its peer");
        if (took > 5.5) return RankOutcome::fail("the stuck call returned after " + std::to_string(took) + " s");
        if (abortSeconds > 5) return RankOutcome::fail("ncclCommAbort took " + std::to_string(abortSeconds) + " s");
        return RankOutcome::pass();
      },
      std::chrono::seconds(60)));
}

INSTANTIATE_TEST_SUITE_P(Transports, DeadPeerTest, testing::Values(Link::kShm, Link::kNet),
                         [](const testing::TestParamInfo<Link>& info) { return linkName(info.param); });

// A rank that destroys its communicator (ncclCommDestroy, no abort) and lives on: a peer's
// next call, which it never makes, fails at once on every link (over the network the
// closed socket says it; over P2P and SHM the destroy marks its FIFOs), not after
// CHORUS_TIMEOUT (600 s here), and a WARN says why.
class DestroyedPeerTest : public testing::TestWithParam<Link> {};

TEST_P(DestroyedPeerTest, ACallThePeerNeverMakesFailsAtOnce) {
  ScopedEnv env;
  forceLinkNoTimeout(env, GetParam());
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanksWithId(
      launchModeOf(GetParam()), kRanks,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> values(4096, 1.0f);
        for (int call = 0; call < 3; ++call) {
          if (ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr) !=
              ncclSuccess) {
            ncclCommAbort(comm);
            return RankOutcome::fail("matched call " + std::to_string(call) + " failed");
          }
        }
        if (rank == kVictim) {
          const ncclResult_t destroyed = ncclCommDestroy(comm);
          std::this_thread::sleep_for(std::chrono::seconds(6));  // alive past the others' limit
          return destroyed == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy failed");
        }
        const auto start = Clock::now();
        const ncclResult_t r =
            ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr);
        const double took = secondsSince(start);
        ncclCommAbort(comm);
        if (r != ncclRemoteError) return RankOutcome::fail("the call without its peer returned " + resultName(r));
        if (took > 5) return RankOutcome::fail("the call without its peer failed after " + std::to_string(took) + " s");
        return RankOutcome::pass();
      },
      std::chrono::seconds(60)));
  const char* why = GetParam() == Link::kNet ? "destroyed its communicator)"
                                             : "peer rank 1 destroyed its communicator (ncclCommDestroy)";
  bool said = false;
  for (const std::string& line : log.lines())
    said = said || (line.find("WARN") != std::string::npos && line.find(why) != std::string::npos);
  EXPECT_TRUE(said) << "no WARN says: " << why;
}

INSTANTIATE_TEST_SUITE_P(Links, DestroyedPeerTest, testing::Values(Link::kP2p, Link::kShm, Link::kNet),
                         [](const testing::TestParamInfo<Link>& info) { return linkName(info.param); });

}  // namespace
}  // namespace chorus_test
