// Runs a function on N ranks of one communicator: as threads of this process,
// as forked processes, or as one thread driving all ranks of ncclCommInitAll.
//
// Rank functions must not use gtest assertions (in a forked child they would be
// lost): they return a RankOutcome, and the launcher's caller turns failures
// into gtest failures with EXPECT_RANKS_OK.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus_test {

enum class LaunchMode { kThreads, kProcesses };
const char* launchModeName(LaunchMode mode);
// For gtest's parameter printing (test names and failure messages).
inline void PrintTo(LaunchMode mode, std::ostream* out) { *out << launchModeName(mode); }

struct RankOutcome {
  bool ok = true;
  std::string message;  // first failures, for the gtest report

  static RankOutcome pass() { return {}; }
  static RankOutcome fail(std::string why) { return {false, std::move(why)}; }
};

struct LaunchResult {
  std::vector<RankOutcome> ranks;  // one per rank
  bool allOk() const;
  std::string describe() const;  // "rank 2: ...\nrank 5: ..." for the failed ranks
};

struct RankContext {
  ncclComm_t comm;
  int rank;
  int nranks;
};

// A rank's work on a communicator the launcher created with ncclCommInitRank
// and destroys (checking ncclSuccess) after the function returns.
using RankBody = std::function<RankOutcome(const RankContext&)>;
// A rank's work given only the unique id: for tests that create their own
// communicators (configs, non-blocking, several communicators).
using RankBodyWithId = std::function<RankOutcome(int rank, int nranks, const ncclUniqueId& id)>;
// One thread, every communicator of ncclCommInitAll(nranks, NULL); the body
// returns one outcome per rank. The launcher destroys the communicators.
using AllRanksBody = std::function<std::vector<RankOutcome>(std::span<const ncclComm_t> comms)>;

constexpr std::chrono::seconds kDefaultRankTimeout{120};

// Every rank calls ncclCommInitRank with one id from ncclGetUniqueId. In process
// mode the id comes from child 0 (never from the parent: the library may start
// threads, and forking a threaded process is unsafe). A rank that does not
// finish within `timeout` is reported (processes are SIGKILLed; a hung thread
// cannot be stopped, so the test binary exits after printing which rank hung).
LaunchResult runRanks(LaunchMode mode, int nranks, const RankBody& body,
                      std::chrono::seconds timeout = kDefaultRankTimeout);
LaunchResult runRanksWithId(LaunchMode mode, int nranks, const RankBodyWithId& body,
                            std::chrono::seconds timeout = kDefaultRankTimeout);
LaunchResult runAllRanksOneThread(int nranks, const AllRanksBody& body,
                                  std::chrono::seconds timeout = kDefaultRankTimeout);

// Runs `body` in one forked child (no communicator), for tests that need a process of
// their own: exit-time behaviour, a crash. The child inherits what ran in this process;
// once-per-process behaviour needs inFreshProcess (harness/fresh_process.h).
RankOutcome runInChildProcess(const std::function<RankOutcome()>& body,
                              std::chrono::seconds timeout = kDefaultRankTimeout);

// "ncclInvalidArgument(4)" — names for messages.
std::string resultName(ncclResult_t result);

}  // namespace chorus_test

// In a function that returns why it failed ("" for nothing): returns "what: <result>"
// when `call` does not return ncclSuccess.
#define CHECK_NCCL(call, what)                                                              \
  do {                                                                                      \
    const ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess) return std::string(what) + ": " + ::chorus_test::resultName(r_); \
  } while (0)

#define EXPECT_RANKS_OK(launchResult)                                  \
  do {                                                                 \
    const ::chorus_test::LaunchResult& chorusLaunch_ = (launchResult); \
    EXPECT_TRUE(chorusLaunch_.allOk()) << chorusLaunch_.describe();    \
  } while (0)
