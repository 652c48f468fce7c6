// A peer's death over shared memory is what the kernel says (core/process_liveness.h):
//  - a SIGKILLed rank that its parent has not reaped yet (a zombie) is dead: its peer's
//    waiting call fails within seconds, though the pid still exists;
//  - ranks in different PID namespaces sharing /dev/shm (containers of one pod) see each
//    other alive however long one waits for the other.
// Each test runs its ranks as grandchildren of a fresh child process, which reaps them
// itself (the zombie needs a parent that does not).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kSkip = "SKIP: ";

// The process state letter of /proc/<pid>/stat ('Z' for a zombie), or '?'.
char processState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
}

// One rank in a forked process: the id through `pipeFds` (rank 0 makes it), then `body`.
// Exits 0 when body passes.
pid_t forkRank(int rank, int pipeFds[2], const std::function<bool(ncclComm_t)>& body) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess || write(pipeFds[1], &id, sizeof id) != sizeof id) _exit(2);
  } else if (read(pipeFds[0], &id, sizeof id) != sizeof id) {
    _exit(2);
  }
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) _exit(3);
  _exit(body(comm) ? 0 : 1);
}

bool allReduceGives(ncclComm_t comm, int32_t expected) {
  std::vector<int32_t> data(1 << 16, 1);
  return ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, comm, nullptr) == ncclSuccess &&
         data.back() == expected;
}

TEST(Liveness, AZombiePeerIsDead) {
  ScopedEnv env;
  env.unset("CHORUS_TIMEOUT");  // 600 s: only noticing the death can pass
  RankOutcome outcome = runInChildProcess(
      [] {
        int fds[2];
        if (pipe(fds) != 0) return RankOutcome::fail("pipe");
        const pid_t survivor = forkRank(0, fds, [](ncclComm_t comm) {
          if (!allReduceGives(comm, 2)) return false;
          const auto start = Clock::now();
          std::vector<int32_t> data(1 << 16, 1);  // rank 1 is dead by now, or dies meanwhile
          const ncclResult_t r =
              ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, comm, nullptr);
          const double took = std::chrono::duration<double>(Clock::now() - start).count();
          return (r == ncclRemoteError || r == ncclSystemError) && took < 30;
        });
        const pid_t victim = forkRank(1, fds, [](ncclComm_t comm) {
          allReduceGives(comm, 2);
          raise(SIGKILL);
          return false;
        });
        // The victim stays a zombie until the survivor is done: only the survivor is reaped.
        int status = 0;
        waitpid(survivor, &status, 0);
        const char victimState = processState(victim);
        waitpid(victim, nullptr, 0);
        if (victimState != 'Z') return RankOutcome::fail(std::string("the victim was not a zombie: ") + victimState);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
          return RankOutcome::fail("the survivor's call did not fail within 30 s (status " + std::to_string(status) +
                                   ")");
        return RankOutcome::pass();
      },
      std::chrono::seconds(120));
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(Liveness, RanksInDifferentPidNamespacesStayAlive) {
  RankOutcome outcome = runInChildProcess(
      [] {
        int fds[2];
        if (pipe(fds) != 0) return RankOutcome::fail("pipe");
        // Rank 0 keeps rank 1 waiting for 2.5 s at each call: longer than a liveness check.
        const pid_t first = forkRank(0, fds, [](ncclComm_t comm) {
          for (int call = 0; call < 2; ++call) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2500));
            if (!allReduceGives(comm, 2)) return false;
          }
          return ncclCommDestroy(comm) == ncclSuccess;
        });
        if (unshare(CLONE_NEWPID) != 0) {
          kill(first, SIGKILL);
          waitpid(first, nullptr, 0);
          return RankOutcome::fail(std::string(kSkip) + "unshare(CLONE_NEWPID) is not permitted here");
        }
        const pid_t second = forkRank(1, fds, [](ncclComm_t comm) {
          if (getpid() != 1) return false;  // the first process of its namespace
          for (int call = 0; call < 2; ++call)
            if (!allReduceGives(comm, 2)) return false;
          return ncclCommDestroy(comm) == ncclSuccess;
        });
        int statusFirst = 0, statusSecond = 0;
        waitpid(first, &statusFirst, 0);
        waitpid(second, &statusSecond, 0);
        if (statusFirst != 0 || statusSecond != 0)
          return RankOutcome::fail("rank 0 status " + std::to_string(statusFirst) + ", rank 1 (pid namespace) " +
                                   std::to_string(statusSecond));
        return RankOutcome::pass();
      },
      std::chrono::seconds(120));
  if (!outcome.ok && outcome.message.rfind(kSkip, 0) == 0) GTEST_SKIP() << outcome.message;
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace chorus_test
