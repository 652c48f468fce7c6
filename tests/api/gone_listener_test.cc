// A bootstrap listener that was up and has closed refuses connections for good: the root of
// an id that already made its communicator, the listener of a rank that destroyed its
// communicator. A rank connecting there fails after a few seconds of refusals
// (Socket::kGoneAfterSeconds) with a WARN that says who is gone and why that happens, rather
// than retrying until CHORUS_BOOTSTRAP_TIMEOUT (120 s here).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/fork_signal.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// Well past Socket::kGoneAfterSeconds (5), far below the bootstrap timeout.
constexpr double kPromptSeconds = 30.0;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string checkFailedPromptly(const std::string& what, ncclResult_t result, double seconds, const char* because) {
  const std::string error = ncclGetLastError(nullptr);
  if (result == ncclSuccess) return what + " succeeded";
  if (seconds > kPromptSeconds) return what + " failed only after " + std::to_string(seconds) + " s";
  if (error.find(because) == std::string::npos)
    return what + ": the last error does not say \"" + because + "\": " + error;
  return "";
}

// The usual mistake: one id for two communicators. Its root ended once it answered the first.
TEST(GoneListener, ASecondCommunicatorFromOneIdFailsSayingTheRootServesOne) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "120");
  RankOutcome outcome = runInChildProcess([] {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return RankOutcome::fail("ncclGetUniqueId failed");
    ncclComm_t first = nullptr;
    if (ncclCommInitRank(&first, 1, id, 0) != ncclSuccess) return RankOutcome::fail("the first init failed");
    ncclComm_t second = nullptr;
    const auto start = Clock::now();
    const ncclResult_t result = ncclCommInitRank(&second, 1, id, 0);
    const std::string problem = checkFailedPromptly("the second init with the same id", result, secondsSince(start),
                                                    "each ncclCommInitRank* needs an id of its own");
    if (result == ncclSuccess) ncclCommDestroy(second);
    ncclCommDestroy(first);
    return problem.empty() ? RankOutcome::pass() : RankOutcome::fail(problem);
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

// Rank 1 destroys its communicator and lives on; rank 0's first Recv from it must send it a
// connection's handle through the bootstrap: over the connection init opened, which rank 1
// closed, or to its listener, which is gone.
TEST(GoneListener, AFirstRecvFromARankThatDestroyedItsCommunicatorFails) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "120");
  ForkSignal destroyed;  // rank 1 -> rank 0
  ForkSignal finished;   // rank 0 -> rank 1
  EXPECT_RANKS_OK(runRanksWithId(
      LaunchMode::kProcesses, 2,
      [&destroyed, &finished](int rank, int nranks, const ncclUniqueId& id) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return RankOutcome::fail("init failed");
        std::vector<float> values(1024, 1.0f);
        if (ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclSum, comm, nullptr) !=
            ncclSuccess) {
          ncclCommAbort(comm);
          return RankOutcome::fail("the matched AllReduce failed");
        }
        if (rank == 1) {
          const ncclResult_t result = ncclCommDestroy(comm);
          destroyed.post();
          finished.wait(1, std::chrono::seconds(60));  // alive, not dead, while rank 0 tries
          return result == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy failed");
        }
        if (!destroyed.wait(1, std::chrono::seconds(60))) {
          ncclCommAbort(comm);
          return RankOutcome::fail("rank 1 did not say it destroyed its communicator");
        }
        const auto start = Clock::now();
        const ncclResult_t result = ncclRecv(values.data(), values.size(), ncclFloat32, 1, comm, nullptr);
        std::string problem =
            checkFailedPromptly("the Recv", result, secondsSince(start), "rank 1 at ");
        const std::string why = ncclGetLastError(nullptr);
        if (problem.empty() && why.find("it destroyed its communicator, or its process exited") == std::string::npos)
          problem = "the last error does not say why rank 1 is gone: " + why;
        ncclCommAbort(comm);
        finished.post();
        return problem.empty() ? RankOutcome::pass() : RankOutcome::fail(problem);
      },
      std::chrono::seconds(90)));
}

}  // namespace
}  // namespace chorus_test
