// How the jobs a group collects besides collective calls run: a communicator's set-up (its
// own init, or a split, shrink, grow or window registration of its parent's) and one-sided
// calls. A blocking communicator's run on the thread that ends the group; a non-blocking
// one's on its worker (submitAsync, group.h), whose state (asyncResult) tracks them.
#pragma once

#include <functional>
#include <vector>

#include "src/comm/comm.h"
#include "src/group/group.h"

namespace chorus {

// A set-up job the group runs at its end (enqueueInit).
struct InitJob {
  ncclComm* comm;
  std::function<ncclResult_t()> run;
  InitKind kind;
};

// A one-sided call the group runs at its end (enqueueRma).
struct RmaJob {
  ncclComm* comm;
  std::function<ncclResult_t()> run;
};

// Runs a job of `comm` on this thread and stores its outcome in the communicator's state.
// A communicator's own set-up is counted while it runs: an abort from another thread then
// leaves the communicator to this thread (ncclCommAbort), which reports the set-up failed.
// A job of the parent's (split, shrink, grow, window registration) counts as the parent's
// work, which an abort waits for (haltWork); it ends early on the abort flag.
ncclResult_t runInitJob(ncclComm* comm, InitKind kind, const std::function<ncclResult_t()>& job);

// Runs one-sided jobs: a blocking communicator's on this thread, in order; a non-blocking
// one's on its worker (then *inProgress). While a job runs it counts as the communicator's
// work, which abort and destroy wait for (haltWork).
ncclResult_t runRmaJobs(std::vector<RmaJob>& jobs, bool* inProgress);

}  // namespace chorus
