// CHORUS_FAULT through the public API, each rank in its own process (README "Injecting
// faults"): a rank killed at its 3rd AllReduce makes the survivors' 3rd AllReduce fail with
// ncclRemoteError within seconds while the calls before it succeed with the right data; a
// composite call (AlltoAll) counts once for #N; a delay holds the calls it names and they
// still succeed; a stall makes its peers hit CHORUS_TIMEOUT and an abort ends it; a break
// fails the call on every rank at once; a malformed rule gets one WARN naming it and
// changes nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr size_t kCount = 4096;

// The WARN lines of the captured logs that contain every one of `parts`.
int countWarns(const TuningLogCapture& log, std::initializer_list<const char*> parts) {
  int n = 0;
  for (const std::string& line : log.lines()) {
    bool all = line.find("NCCL WARN") != std::string::npos;
    for (const char* part : parts) all = all && line.find(part) != std::string::npos;
    n += all ? 1 : 0;
  }
  return n;
}

// The environment of one test: the rules, a log to read the WARNs from, and the default
// CHORUS_TIMEOUT (600 s) unless a test sets it, so that only the fault path can fail fast.
struct FaultEnv {
  explicit FaultEnv(const std::string& rules) : log(env, "INIT") {
    env.set("CHORUS_FAULT", rules);
    env.unset("CHORUS_TIMEOUT");
  }
  ScopedEnv env;
  TuningLogCapture log;
};

// One rank's calls on a communicator, each checked: AllReduce of (rank + 1), Broadcast from
// rank 0, AlltoAll of (rank * 100 + destination). A failure names the call.
class Caller {
 public:
  Caller(ncclComm_t comm, int rank, int nranks) : comm_(comm), rank_(rank), nranks_(nranks) {}

  ncclResult_t allReduce(std::string* wrong) {
    std::vector<float> values(kCount, static_cast<float>(rank_ + 1));
    const ncclResult_t r = ncclAllReduce(values.data(), values.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr);
    const float expected = static_cast<float>(nranks_ * (nranks_ + 1) / 2);
    if (r == ncclSuccess && (values.front() != expected || values.back() != expected))
      *wrong = "AllReduce gave " + std::to_string(values.front()) + ", expected " + std::to_string(expected);
    return r;
  }

  ncclResult_t broadcast(int call, std::string* wrong) {
    std::vector<float> values(kCount, rank_ == 0 ? static_cast<float>(call) : -1.0f);
    const ncclResult_t r = ncclBroadcast(values.data(), values.data(), kCount, ncclFloat32, 0, comm_, nullptr);
    if (r == ncclSuccess && (values.front() != call || values.back() != call))
      *wrong = "Broadcast gave " + std::to_string(values.back()) + ", expected " + std::to_string(call);
    return r;
  }

  ncclResult_t alltoAll(std::string* wrong) {
    std::vector<int32_t> send(kCount * nranks_), recv(kCount * nranks_, -1);
    for (int peer = 0; peer < nranks_; ++peer) std::fill_n(send.begin() + peer * kCount, kCount, rank_ * 100 + peer);
    const ncclResult_t r = ncclAlltoAll(send.data(), recv.data(), kCount, ncclInt32, comm_, nullptr);
    for (int peer = 0; r == ncclSuccess && peer < nranks_ && wrong->empty(); ++peer) {
      if (recv[peer * kCount] != peer * 100 + rank_ || recv[peer * kCount + kCount - 1] != peer * 100 + rank_)
        *wrong = "AlltoAll: the block from rank " + std::to_string(peer) + " is wrong";
    }
    return r;
  }

 private:
  ncclComm_t comm_;
  int rank_;
  int nranks_;
};

// A survivor's failing call: ncclRemoteError, quickly, and the communicator says so too.
RankOutcome expectRemoteError(ncclComm_t comm, ncclResult_t r, double took, const std::string& what) {
  if (r != ncclRemoteError) return RankOutcome::fail(what + " returned " + resultName(r) + ", not ncclRemoteError");
  if (took > 30) return RankOutcome::fail(what + " failed only after " + std::to_string(took) + " s");
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  if (async != ncclRemoteError) return RankOutcome::fail("ncclCommGetAsyncError reports " + resultName(async));
  if (ncclCommAbort(comm) != ncclSuccess) return RankOutcome::fail("ncclCommAbort failed");
  return RankOutcome::pass();
}

ncclComm_t init(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  return ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess ? comm : nullptr;
}

void expectKilled(const LaunchResult& result, int victim) {
  ASSERT_GT(result.ranks.size(), static_cast<size_t>(victim));
  EXPECT_FALSE(result.ranks[victim].ok) << "rank " << victim << " was to be killed";
  EXPECT_NE(result.ranks[victim].message.find("signal 9"), std::string::npos) << result.ranks[victim].message;
  for (size_t rank = 0; rank < result.ranks.size(); ++rank) {
    if (static_cast<int>(rank) == victim) continue;
    EXPECT_TRUE(result.ranks[rank].ok) << "rank " << rank << ": " << result.ranks[rank].message;
  }
}

// AllReduce, Broadcast, AllReduce, Broadcast, AllReduce: rank 1 dies at the third AllReduce
// (the 5th call), so the Broadcasts must not count towards AllReduce#3.
TEST(FaultInjection, KillAtTheThirdAllReduceFailsTheSurvivorsThirdAllReduce) {
  FaultEnv fault("rank1:kill@AllReduce#3");
  const LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, 3,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        for (int call = 1; call <= 4; ++call) {
          const ncclResult_t r = call % 2 == 1 ? calls.allReduce(&wrong) : calls.broadcast(call, &wrong);
          if (r != ncclSuccess) return RankOutcome::fail("call " + std::to_string(call) + ": " + resultName(r));
          if (!wrong.empty()) return RankOutcome::fail("call " + std::to_string(call) + ": " + wrong);
        }
        const auto start = Clock::now();
        const ncclResult_t r = calls.allReduce(&wrong);
        if (rank == 1) return RankOutcome::fail("the victim survived its 3rd AllReduce: " + resultName(r));
        return expectRemoteError(comm, r, secondsSince(start), "the 3rd AllReduce");
      },
      std::chrono::seconds(90));
  expectKilled(result, 1);
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 1 killing its process", "AllReduce #3 (call #5 "}), 1);
  EXPECT_GE(countWarns(fault.log, {"peer rank 1"}), 1) << "a survivor should name the dead rank";
}

// #N counts calls of every kind, and an AlltoAll is one call (not its sends and receives):
// rank 1 dies at the AllReduce after it, not inside it.
TEST(FaultInjection, ACompositeCallCountsOnceForHashN) {
  FaultEnv fault("rank1:kill@#3");
  const LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        ncclResult_t r = calls.allReduce(&wrong);
        if (r != ncclSuccess || !wrong.empty()) return RankOutcome::fail("call 1: " + resultName(r) + " " + wrong);
        r = calls.alltoAll(&wrong);
        if (r != ncclSuccess || !wrong.empty()) return RankOutcome::fail("AlltoAll: " + resultName(r) + " " + wrong);
        const auto start = Clock::now();
        r = calls.allReduce(&wrong);
        if (rank == 1) return RankOutcome::fail("the victim survived call #3: " + resultName(r));
        return expectRemoteError(comm, r, secondsSince(start), "call #3");
      },
      std::chrono::seconds(90));
  expectKilled(result, 1);
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 1 killing", "AllReduce #2 (call #3 "}), 1);
}

// A delay holds every Broadcast of rank 0 (no #N) and nothing fails; its first firing is
// the one WARN.
TEST(FaultInjection, ADelayHoldsTheCallsItNamesAndTheyStillSucceed) {
  FaultEnv fault("rank0:delay=300ms@Broadcast");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        for (int call = 1; call <= 4; ++call) {
          const auto start = Clock::now();
          const bool isBroadcast = call % 2 == 0;
          const ncclResult_t r = isBroadcast ? calls.broadcast(call, &wrong) : calls.allReduce(&wrong);
          const double took = secondsSince(start);
          if (r != ncclSuccess) return RankOutcome::fail("call " + std::to_string(call) + ": " + resultName(r));
          if (!wrong.empty()) return RankOutcome::fail("call " + std::to_string(call) + ": " + wrong);
          if (rank == 0 && isBroadcast && took < 0.3)
            return RankOutcome::fail("Broadcast " + std::to_string(call) + " took only " + std::to_string(took) + " s");
        }
        return ncclCommDestroy(comm) == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy failed");
      },
      std::chrono::seconds(90)));
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 0 delaying Broadcast #1 (call #2 ", "by 300 ms"}), 1);
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT"}), 1) << "later firings are INFO, and nothing else is said";
}

constexpr double kAbortAfter = 5;  // seconds: well after the stalled rank's peer timed out (about 2 s)

// Rank 1 stalls at its 2nd call: rank 0 times out (CHORUS_TIMEOUT=1) with ncclRemoteError,
// and rank 1's call stays held until another thread aborts the communicator.
TEST(FaultInjection, AStallMakesThePeersTimeOutAndAnAbortEndsIt) {
  FaultEnv fault("rank1:stall@#2");
  fault.env.set("CHORUS_TIMEOUT", "1");
  const LaunchResult result = runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        ncclResult_t r = calls.allReduce(&wrong);
        if (r != ncclSuccess || !wrong.empty()) return RankOutcome::fail("call 1: " + resultName(r) + " " + wrong);
        const auto start = Clock::now();
        if (rank == 0) {
          r = calls.allReduce(&wrong);
          return expectRemoteError(comm, r, secondsSince(start), "the call after the stall");
        }
        std::atomic<double> abortTook{-1};
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::duration<double>(kAbortAfter));
          const auto abortStart = Clock::now();
          ncclCommAbort(comm);
          abortTook = secondsSince(abortStart);
        });
        r = calls.allReduce(&wrong);
        const double took = secondsSince(start);
        aborter.join();
        if (r != ncclSystemError) return RankOutcome::fail("the stalled call returned " + resultName(r));
        if (took < kAbortAfter - 0.5) return RankOutcome::fail("the stall ended after " + std::to_string(took) + " s");
        if (abortTook > 2) return RankOutcome::fail("ncclCommAbort took " + std::to_string(abortTook) + " s");
        return RankOutcome::pass();
      },
      std::chrono::seconds(90));
  EXPECT_RANKS_OK(result);
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 1 stalling at AllReduce #2 (call #2 "}), 1);
  EXPECT_GE(countWarns(fault.log, {"timed out", "peer rank 1"}), 1) << "rank 0 should time out on rank 1";
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 1: the communicator was aborted", "stall"}), 1);
}

// Rank 2 breaks its connections at its 2nd AllReduce: every rank's 2nd AllReduce fails with
// ncclRemoteError at once (CHORUS_TIMEOUT stays 600 s), and the next call fails too.
TEST(FaultInjection, ABreakFailsTheCallOnEveryRankAtOnce) {
  FaultEnv fault("rank2:break@AllReduce#2");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 3,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        ncclResult_t r = calls.allReduce(&wrong);
        if (r != ncclSuccess || !wrong.empty()) return RankOutcome::fail("call 1: " + resultName(r) + " " + wrong);
        const auto start = Clock::now();
        r = calls.allReduce(&wrong);
        const double took = secondsSince(start);
        if (r == ncclRemoteError && calls.broadcast(3, &wrong) == ncclSuccess)
          return RankOutcome::fail("a call after the break succeeded");
        return expectRemoteError(comm, r, took, "the 2nd AllReduce");
      },
      std::chrono::seconds(90)));
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank 2 breaking its connections at AllReduce #2"}), 1);
  EXPECT_GE(countWarns(fault.log, {"the connection with peer rank 2 is broken"}), 1);
}

// A malformed rule gets one WARN per process naming it and the whole value; the calls run
// as if it were not there (rank 1 would otherwise be killed at its 2nd AllReduce).
TEST(FaultInjection, AMalformedRuleIsNamedOnceAndChangesNothing) {
  const std::string rules = "rank1:kil@AllReduce#2;rank1:kill@AllReduce#0";
  FaultEnv fault(rules);
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = init(rank, nranks, id);
        if (comm == nullptr) return RankOutcome::fail("init failed");
        Caller calls(comm, rank, nranks);
        std::string wrong;
        for (int call = 1; call <= 3; ++call) {
          const ncclResult_t r = calls.allReduce(&wrong);
          if (r != ncclSuccess) return RankOutcome::fail("call " + std::to_string(call) + ": " + resultName(r));
          if (!wrong.empty()) return RankOutcome::fail("call " + std::to_string(call) + ": " + wrong);
        }
        return ncclCommDestroy(comm) == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy failed");
      },
      std::chrono::seconds(90)));
  const std::string value = "CHORUS_FAULT=\"" + rules + "\"";
  EXPECT_EQ(countWarns(fault.log, {value.c_str(), "\"rank1:kil@AllReduce#2\"", "unknown action \"kil\""}), 2)
      << "one WARN per rank's process";
  EXPECT_EQ(countWarns(fault.log, {value.c_str(), "\"rank1:kill@AllReduce#0\""}), 2);
  EXPECT_EQ(countWarns(fault.log, {"CHORUS_FAULT: rank"}), 0) << "no rule fired";
}

}  // namespace
}  // namespace chorus_test
