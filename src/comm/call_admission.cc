#include "src/comm/call_admission.h"

#include <chrono>
#include <optional>
#include <thread>

#include "core/debug.h"

namespace chorus {

// Whether `comm` may take a call: not failed, revoked or suspended (a WARN says which).
ncclResult_t checkAcceptsWork(const ncclComm* comm) {
  const void* c = static_cast<const void*>(comm);
  const int async = comm->asyncResult.load();
  if (async != ncclSuccess && async != ncclInProgress) {
    WARN("Communicator %p (rank %d) has failed earlier (%s); abort or destroy it", c, comm->rank,
         ncclGetErrorString(static_cast<ncclResult_t>(async)));
    return static_cast<ncclResult_t>(async);
  }
  if (comm->revokeFlag.load() != 0) {
    WARN(
        "Communicator %p (rank %d) was revoked (ncclCommRevoke or NCCL_SHRINK_ABORT): it can only be destroyed, "
        "split or shrunk",
        c, comm->rank);
    return ncclInvalidUsage;
  }
  if (comm->finalized.load()) {
    WARN("Communicator %p (rank %d) is finalized (ncclCommFinalize): it can only be destroyed", c, comm->rank);
    return ncclInvalidUsage;
  }
  if (comm->suspended.load()) {
    WARN("Communicator %p (rank %d) is suspended (ncclCommSuspend): call ncclCommResume first", c, comm->rank);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

// A revoked communicator (ncclCommRevoke, NCCL_SHRINK_ABORT) takes no new calls, and the calls
// another thread has in it are stopping: what claims it now is the shrink or split that
// follows the revoke, often from another thread than the one whose call was stuck. That waits
// for the stopped call's group to let go (bounded: a group left open holds it).
constexpr auto kRevokedClaimWait = std::chrono::seconds(10);

ncclResult_t checkSetUp(const ncclComm* comm, const char* what) {
  if (comm->ready.load()) return ncclSuccess;
  WARN("Rank %d: the communicator's set-up failed, so %s queued on it did not run", comm->rank, what);
  const ncclResult_t why = static_cast<ncclResult_t>(comm->asyncResult.load());
  return why != ncclSuccess && why != ncclInProgress ? why : ncclInvalidUsage;
}

ncclResult_t claimForCalls(ncclComm* comm, const void* group, bool* fresh) {
  *fresh = false;
  // The clock is read only once a claim has to wait: every call claims, and a read of it
  // costs a tenth of a warm call's path here.
  std::optional<std::chrono::steady_clock::time_point> until;
  for (;;) {
    const void* holder = nullptr;
    if (comm->callingGroup.compare_exchange_strong(holder, group)) {
      *fresh = true;
      return ncclSuccess;
    }
    if (holder == group) return ncclSuccess;
    if (comm->revokeFlag.load() == 0) break;
    const auto now = std::chrono::steady_clock::now();
    if (!until) until = now + kRevokedClaimWait;
    if (now >= *until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  WARN(
      "Communicator %p (rank %d) is in use by another thread, which runs a call of it or holds calls of it in an "
      "open group: a communicator takes calls from one thread at a time (threads use communicators of their own); "
      "this call is refused",
      static_cast<void*>(comm), comm->rank);
  return ncclInvalidUsage;
}

void releaseForCalls(ncclComm* comm, const void* group) {
  const void* mine = group;
  comm->callingGroup.compare_exchange_strong(mine, nullptr);
}

}  // namespace chorus
