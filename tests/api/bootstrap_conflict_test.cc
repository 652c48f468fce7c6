// Ranks that were told different things about one communicator (two processes given the
// same rank, different rank counts) all fail at once with ncclInvalidUsage and an error
// naming the disagreement, rather than the ones that agree waiting out
// CHORUS_BOOTSTRAP_TIMEOUT. Processes, so that each has its own ncclGetLastError.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "harness/fork_signal.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// Far beyond how long a refusal takes, far below the bootstrap timeout the test sets.
constexpr double kPromptSeconds = 20.0;

// Calls ncclCommInitRank(nranks, rank) and expects it refused promptly, saying `because`.
RankOutcome expectRefused(int nranks, int rank, const ncclUniqueId& id, const std::string& because) {
  const auto start = Clock::now();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, nranks, id, rank);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string error = ncclGetLastError(nullptr);
  const std::string as = "rank " + std::to_string(rank) + " of " + std::to_string(nranks);
  if (result != ncclInvalidUsage) {
    if (comm != nullptr) ncclCommDestroy(comm);
    return RankOutcome::fail(as + ": ncclCommInitRank returned " + resultName(result) + ", not ncclInvalidUsage");
  }
  if (seconds > kPromptSeconds) return RankOutcome::fail(as + ": refused only after " + std::to_string(seconds) + " s");
  if (error.find("refused the communicator") == std::string::npos || error.find(because) == std::string::npos) {
    return RankOutcome::fail(as + ": the last error does not say \"" + because + "\": " + error);
  }
  return RankOutcome::pass();
}

// The root runs in the process of launcher rank 0, which made the id; a rank that reaches it
// after that process exited finds no root to tell it anything. So launcher rank 0 stays
// until the others are done.
RankOutcome stayForOthers(const ForkSignal& done, int rank, int nranks, RankOutcome outcome) {
  if (rank != 0) {
    if (!done.post()) return RankOutcome::fail("could not post to the fork signal");
  } else {
    done.wait(nranks - 1, std::chrono::seconds(60));  // the launcher reports a rank that hung
  }
  return outcome;
}

TEST(BootstrapConflict, TwoProcessesGivenOneRankAreBothRefusedAtOnce) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "120");
  ForkSignal done;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 2, [&done](int rank, int nranks, const ncclUniqueId& id) {
    return stayForOthers(done, rank, nranks, expectRefused(nranks, 0, id, "two processes were given rank 0 of 2"));
  }));
}

TEST(BootstrapConflict, RanksThatDisagreeOnTheRankCountAreAllRefusedAtOnce) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "120");
  ForkSignal done;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 3, [&done](int rank, int nranks, const ncclUniqueId& id) {
    // Ranks 0 and 1 agree on 3 ranks; the third process believes in 4 and claims rank 3.
    // Whichever of them reaches the root first, all three are refused.
    const std::string because = "says the communicator has";
    return stayForOthers(done, rank, nranks,
                         rank < 2 ? expectRefused(3, rank, id, because) : expectRefused(4, 3, id, because));
  }));
}

}  // namespace
}  // namespace chorus_test
