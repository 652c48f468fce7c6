// What ncclGetUniqueId costs: the roots of every id of a process share one thread, which
// ends with the last of them; an id nobody uses keeps its listening socket only until its
// timeout, and a used one closes it as soon as its ranks are answered. Counted in forked
// children, so that no root of an earlier test is counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/socket_count.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `seconds` for `count()` to come down to `target`; returns the last count.
template <typename Count>
int settleAt(int target, double seconds, Count count) {
  int now = count();
  for (auto start = Clock::now(); now > target && std::chrono::duration<double>(Clock::now() - start).count() < seconds;
       now = count()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return now;
}

TEST(UniqueId, UnusedIdsShareOneThreadAndCloseTheirSocketsAtTheTimeout) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "3");  // the 50 must still be open when counted, on a loaded machine too
  RankOutcome outcome = runInChildProcess([] {
    int version = 0;
    ncclGetVersion(&version);  // whatever the library starts at its first call is not the roots'
    const int threads = threadsOfThisProcess();
    const int listeners = listeningSockets();
    std::vector<ncclUniqueId> ids(50);
    for (auto& id : ids)
      if (ncclGetUniqueId(&id) != ncclSuccess) return RankOutcome::fail("ncclGetUniqueId failed");
    const int threadsWhileOpen = threadsOfThisProcess();
    const int listenersWhileOpen = listeningSockets();
    if (threadsWhileOpen > threads + 1)
      return RankOutcome::fail("50 unused ids hold " + std::to_string(threadsWhileOpen - threads) + " threads");
    if (listenersWhileOpen != listeners + 50)
      return RankOutcome::fail("50 ids hold " + std::to_string(listenersWhileOpen - listeners) + " listeners");
    const int listenersAfter = settleAt(listeners, 8.0, listeningSockets);
    if (listenersAfter != listeners)
      return RankOutcome::fail(std::to_string(listenersAfter - listeners) + " listeners left 8 s after a 3 s timeout");
    const int threadsAfter = settleAt(threads, 2.0, threadsOfThisProcess);
    if (threadsAfter != threads)
      return RankOutcome::fail("the root thread did not end with the last root: " + std::to_string(threadsAfter) +
                               " threads, " + std::to_string(threads) + " before");
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(UniqueId, AUsedIdClosesItsRootAtOnce) {
  RankOutcome outcome = runInChildProcess([] {
    const int listeners = listeningSockets();
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return RankOutcome::fail("ncclGetUniqueId failed");
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return RankOutcome::fail("init failed");
    // The communicator's own listener stays (its bootstrap); the root's is gone.
    const int open = settleAt(listeners + 1, 2.0, listeningSockets);
    ncclCommDestroy(comm);
    if (open != listeners + 1)
      return RankOutcome::fail(std::to_string(open - listeners) + " listeners while the communicator lives, not 1");
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

// A child forked while this process's root thread serves an id has no such thread: it
// starts its own for the ids it makes, and closes its copy of the parent's root listener.
TEST(UniqueId, AForkedChildServesItsOwnIds) {
  ScopedEnv env;
  env.set("CHORUS_BOOTSTRAP_TIMEOUT", "20");  // a child that is not served fails in 20 s, not 300
  RankOutcome outcome = runInChildProcess([] {
    ncclUniqueId parentId;
    if (ncclGetUniqueId(&parentId) != ncclSuccess) return RankOutcome::fail("ncclGetUniqueId failed");
    const int parentListeners = listeningSockets();
    RankOutcome child = runInChildProcess(
        [parentListeners] {
          if (listeningSockets() != parentListeners - 1)
            return RankOutcome::fail("the child kept its copy of the parent's root listener");
          ncclUniqueId id;
          if (ncclGetUniqueId(&id) != ncclSuccess) return RankOutcome::fail("ncclGetUniqueId in the child failed");
          ncclComm_t comm = nullptr;
          const ncclResult_t init = ncclCommInitRank(&comm, 1, id, 0);
          if (init != ncclSuccess) return RankOutcome::fail("init on the child's own id: " + resultName(init));
          ncclCommDestroy(comm);
          return RankOutcome::pass();
        },
        std::chrono::seconds(60));
    if (!child.ok) return RankOutcome::fail("child: " + child.message);
    // The parent's root still serves its id.
    ncclComm_t comm = nullptr;
    const ncclResult_t init = ncclCommInitRank(&comm, 1, parentId, 0);
    if (init != ncclSuccess) return RankOutcome::fail("init on the parent's id after the fork: " + resultName(init));
    ncclCommDestroy(comm);
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace chorus_test
