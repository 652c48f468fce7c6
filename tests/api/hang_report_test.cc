// The hang report (src/report/hang_report.h): when a call times out, when a stuck call is
// aborted, and on demand (CHORUS_REPORT_SIGNAL), a rank logs its communicators' last calls,
// and a timed-out wait names the peer and where that peer is ("rank 1 is at ... #3
// (finished): it has not reached #4").
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/fresh_process.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

bool anyLineHas(const std::vector<std::string>& lines, const std::vector<std::string>& parts) {
  for (const std::string& line : lines) {
    bool all = true;
    for (const std::string& p : parts) all = all && line.find(p) != std::string::npos;
    if (all) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

// Rank 1 makes three AllReduces and stops; rank 0's fourth times out.
RankOutcome silentAfterThree(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
  std::vector<float> v(4096, 1.0f);
  for (int i = 0; i < 3; ++i) {
    if (ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) {
      ncclCommAbort(comm);
      return RankOutcome::fail("a matched call failed");
    }
  }
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // past rank 0's timeout
    ncclCommAbort(comm);
    return RankOutcome::pass();
  }
  const ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr);
  ncclCommAbort(comm);
  return r == ncclRemoteError ? RankOutcome::pass() : RankOutcome::fail("the 4th call returned " + resultName(r));
}

// Over shared memory the peer's state is read from the connection; over the network from
// what the proxies relay (transport/net/net_connection.h): the WARN says the same on both.
TEST(HangReport, TimeoutNamesThePeerAndWhereItIsAndListsTheLastCalls) {
  for (Link link : {Link::kShm, Link::kNet}) {
    SCOPED_TRACE(linkName(link));
    ScopedEnv env;
    env.set("CHORUS_TIMEOUT", "2");
    env.set("NCCL_PROTO", "Simple");
    forceLink(env, link);
    TuningLogCapture log(env, "INIT");
    EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 2, silentAfterThree, std::chrono::seconds(60)));
    const std::vector<std::string> lines = log.lines();
    // The WARN alone tells the story: rank 1 finished #3 and never called #4.
    EXPECT_TRUE(anyLineHas(
        lines, {"WARN", "timed out", "AllReduce(sum, float32, 4096; Ring/Simple) #4", "peer rank 1",
                "rank 1 is at AllReduce(sum, float32, 4096; Ring/Simple) #3 (finished)", "it has not reached #4"}))
        << joined(lines);
    EXPECT_TRUE(anyLineHas(lines, {"Hang report of rank 0 of 2", "a call timed out"})) << joined(lines);
    EXPECT_TRUE(anyLineHas(lines, {"last 4 calls, oldest first"})) << joined(lines);
    EXPECT_TRUE(anyLineHas(lines, {"AllReduce(sum, float32, 4096; Ring/Simple) #3", "done after"})) << joined(lines);
    EXPECT_TRUE(anyLineHas(lines, {"AllReduce(sum, float32, 4096; Ring/Simple) #4", "running for"})) << joined(lines);
    EXPECT_TRUE(anyLineHas(lines, {"End of the hang report of rank 0"})) << joined(lines);
  }
}

TEST(HangReport, AbortOfAStuckCallWritesTheReport) {
  ScopedEnv env;
  env.unset("CHORUS_TIMEOUT");
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> v(1024, 1.0f);
        if (rank == 1) {  // never joins; aborts after rank 0's abort, so no broken connection ends rank 0's wait first
          std::this_thread::sleep_for(std::chrono::seconds(6));
          ncclCommAbort(comm);
          return RankOutcome::pass();
        }
        // A report is written for a wait older than 1 s: 2 s of margin for a loaded machine.
        std::thread aborter([comm] {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          ncclCommAbort(comm);
        });
        const ncclResult_t r = ncclBroadcast(v.data(), v.data(), v.size(), ncclFloat32, 1, comm, nullptr);
        aborter.join();
        return r != ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("the aborted call returned ncclSuccess");
      },
      std::chrono::seconds(60)));
  const std::vector<std::string> lines = log.lines();
  EXPECT_TRUE(anyLineHas(lines, {"Hang report of rank 0 of 2", "a stuck call was aborted"})) << joined(lines);
  EXPECT_TRUE(
      anyLineHas(lines, {"stuck: Broadcast(float32, 1024, root 1; Ring/", "#1 waits for step 0 from peer rank 1",
                         "rank 1 has not called anything on this connection yet"}))
      << joined(lines);
}

// A Send in place (CHORUS_P2P_IN_PLACE=1, larger than the slots) waits for its receiver
// to enter the call, not for a slot: its timeout says so.
TEST(HangReport, ASendInPlaceSaysItWaitsForItsReceiverToEnter) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "2");
  env.set("CHORUS_P2P_IN_PLACE", "1");
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kThreads, 2,
      [](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> v(1 << 22, 1.0f);  // 16 MiB: more than the slots hold
        // The first pair makes the connection; rank 1 never receives the second.
        const ncclResult_t first = rank == 0 ? ncclSend(v.data(), 16, ncclFloat32, 1, comm, nullptr)
                                             : ncclRecv(v.data(), 16, ncclFloat32, 0, comm, nullptr);
        if (first != ncclSuccess) {
          ncclCommAbort(comm);
          return RankOutcome::fail("the matched pair returned " + resultName(first));
        }
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(4));  // past rank 0's timeout
          ncclCommAbort(comm);
          return RankOutcome::pass();
        }
        const ncclResult_t r = ncclSend(v.data(), v.size(), ncclFloat32, 1, comm, nullptr);
        ncclCommAbort(comm);
        return r == ncclRemoteError ? RankOutcome::pass() : RankOutcome::fail("the send returned " + resultName(r));
      },
      std::chrono::seconds(60)));
  const std::vector<std::string> lines = log.lines();
  EXPECT_TRUE(anyLineHas(lines, {"WARN", "timed out", "#2 waits for peer rank 1 to enter its receive",
                                 "rank 1 is at Recv(", "it has not reached #2"}))
      << joined(lines);
  EXPECT_FALSE(anyLineHas(lines, {"to free a slot"})) << joined(lines);
}

TEST(HangReport, TheSignalAsksEveryCommunicatorForItsReport) {
  if (!inFreshProcess()) return;  // the signal is armed at a process' first communicator
  ScopedEnv env;
  env.set("CHORUS_REPORT_SIGNAL", "USR1");
  TuningLogCapture log(env, "INIT");
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [&log](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> v(256, 1.0f);
        for (int i = 0; i < 5; ++i) ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr);
        kill(getpid(), SIGUSR1);
        // The report thread writes it; a healthy communicator keeps working meanwhile.
        bool seen = false;
        for (int i = 0; i < 100 && !seen; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          seen = anyLineHas(log.lines(), {"Hang report of rank " + std::to_string(rank), "asked for"});
        }
        const ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr);
        ncclCommDestroy(comm);
        if (!seen) return RankOutcome::fail("no report within 5 s of the signal");
        return r == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("the call after the report failed");
      },
      std::chrono::seconds(60)));
  EXPECT_TRUE(anyLineHas(log.lines(), {"AllReduce(sum, float32, 256; Ring/", "#5", "done after"}))
      << joined(log.lines());
}

}  // namespace
}  // namespace chorus_test
