#include "src/group/group_jobs.h"

#include <mutex>

#include "core/debug.h"
#include "src/comm/call_admission.h"

namespace chorus {
namespace {

// What a blocking communicator's state becomes after one of its set-up jobs returned `r`.
// A job of the parent's (split, shrink, grow, window registration) that found the ranks
// disagreeing did so after a complete exchange: the caller gets the error, and the parent,
// whose bootstrap is intact, stays usable. Any other failure is sticky.
ncclResult_t stateAfterInit(InitKind kind, ncclResult_t r) {
  const bool usageError = r == ncclInvalidArgument || r == ncclInvalidUsage;
  return kind == InitKind::kOfParent && usageError ? ncclSuccess : r;
}

}  // namespace

ncclResult_t runInitJob(ncclComm* comm, InitKind kind, const std::function<ncclResult_t()>& job) {
  if (kind == InitKind::kOfParent) {
    comm->activeRuns.fetch_add(1);
    const ncclResult_t r = job();
    comm->asyncResult.store(stateAfterInit(kind, r));
    comm->activeRuns.fetch_sub(1);  // last: an abort may free the communicator from here on
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    ++comm->initThreads;
  }
  ncclResult_t r = job();
  std::lock_guard<std::mutex> lock(commLifecycleMutex());
  --comm->initThreads;
  if (comm->abandoned && r == ncclSuccess) {
    WARN("Communicator %p (rank %d) was aborted (ncclCommAbort) while it was being set up", static_cast<void*>(comm),
         comm->rank);
    r = ncclSystemError;
  }
  comm->asyncResult.store(r);
  return r;
}

ncclResult_t runRmaJobs(std::vector<RmaJob>& jobs, bool* inProgress) {
  ncclResult_t result = ncclSuccess;
  // As runBlocking's calls: a job queued behind a failed set-up does not run.
  constexpr const char* kWhat = "a one-sided call";
  for (RmaJob& job : jobs) {
    ncclComm* comm = job.comm;
    if (!comm->config.blocking) {
      submitAsync(comm, [comm, run = std::move(job.run)] {
        if (const ncclResult_t r = checkSetUp(comm, kWhat); r != ncclSuccess) return r;
        comm->activeRuns.fetch_add(1);
        const ncclResult_t r = run();
        comm->activeRuns.fetch_sub(1);
        return r;
      });
      *inProgress = true;
      continue;
    }
    const ScopedLogContext logAs(comm->rank, comm->config.commName);
    if (const ncclResult_t r = checkSetUp(comm, kWhat); r != ncclSuccess) {
      if (result == ncclSuccess) result = r;
      continue;
    }
    comm->activeRuns.fetch_add(1);
    const ncclResult_t r = job.run();
    if (r != ncclSuccess) {
      comm->asyncResult.store(r);  // sticky, as a failed collective
      if (result == ncclSuccess) result = r;
    }
    comm->activeRuns.fetch_sub(1);  // last: an abort may free the communicator from here on
  }
  jobs.clear();
  return result;
}

void submitAsync(ncclComm* comm, std::function<ncclResult_t()> job) {
  if (!comm->worker) comm->worker = std::make_unique<AsyncWorker>();
  {
    std::lock_guard<std::mutex> lock(comm->asyncMutex);
    ++comm->asyncJobs;
    if (comm->asyncResult.load() == ncclSuccess) comm->asyncResult.store(ncclInProgress);
  }
  comm->worker->submit([comm, job = std::move(job)] {
    ncclResult_t r = job();
    std::lock_guard<std::mutex> lock(comm->asyncMutex);
    --comm->asyncJobs;
    if (comm->asyncResult.load() != ncclInProgress) return;  // an earlier error stays
    if (r != ncclSuccess) {
      comm->asyncResult.store(r);
    } else if (comm->asyncJobs == 0) {
      comm->asyncResult.store(ncclSuccess);
    }
  });
}

}  // namespace chorus
