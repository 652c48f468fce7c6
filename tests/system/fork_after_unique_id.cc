// A process that forks right after ncclGetUniqueId, its two processes then forming a
// communicator over TCP, as simple NCCL programs do. The fork lands while the id's root
// thread starts up: a lazily initialised static it was setting up then stayed "in
// progress" forever in the child, whose proxy thread hung on it (about 1 run in 16), and
// the child's NET connections never came up. Each run is a fresh process (exec), so that
// every run starts the library anew.
//
//   fork_after_unique_id --runs N    N runs; exits 1 at the first that fails or hangs
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nccl.h"
#include "tests/harness/child_process.h"

namespace {

int rankMain(int rank, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed: %s\n", rank, ncclGetLastError(nullptr));
    return 1;
  }
  float value = static_cast<float>(rank + 1);
  const ncclResult_t reduced = ncclAllReduce(&value, &value, 1, ncclFloat, ncclSum, comm, nullptr);
  ncclCommDestroy(comm);
  if (reduced != ncclSuccess || value != 3.0f) {
    fprintf(stderr, "rank %d: AllReduce gave %g (%s)\n", rank, value, ncclGetErrorString(reduced));
    return 1;
  }
  return 0;
}

// One run: the id, then a fork at once; 0 when both ranks succeed.
int once() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  const pid_t child = fork();
  if (child == 0) _exit(rankMain(1, id));
  const int mine = rankMain(0, id);
  int status = 0;
  waitpid(child, &status, 0);
  return mine != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--once") == 0) return once();
  const int runs = argc == 3 && strcmp(argv[1], "--runs") == 0 ? atoi(argv[2]) : 0;
  if (runs <= 0) {
    fprintf(stderr, "usage: %s --runs N\n", argv[0]);
    return 2;
  }
  // Over TCP (the proxy thread moves the data), with set-up waits short enough that a
  // stuck run shows as one.
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "10", 1);
  for (int run = 0; run < runs; ++run) {
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own group, so a stuck run's two processes are killed together
      execl(argv[0], argv[0], "--once", static_cast<char*>(nullptr));
      _exit(127);
    }
    const int status = chorus_test::ChildProcess(pid, true).exitStatusWithin(std::chrono::seconds(30));
    if (status != 0) {
      fprintf(stderr, "run %d of %d %s\n", run + 1, runs,
              status < 0 ? "hung (killed after 30 s)" : ("failed, exit status " + std::to_string(status)).c_str());
      return 1;
    }
  }
  printf("%d runs: each forked right after ncclGetUniqueId and formed its communicator\n", runs);
  return 0;
}
