// Whether a communicator takes a call now, and from which thread.
//
// A communicator takes calls from one thread at a time, as in NCCL ("multiple threads should
// use separate communicator objects"): its queued calls and its executor belong to one
// thread's group (`ncclComm::callingGroup`) until that group has run them. A call from another
// thread meanwhile is refused with a WARN rather than interleaved, which would race on the
// communicator's state and pair calls across ranks by chance. A non-blocking communicator's
// worker runs what a group handed it; the group lets go once it has, and the worker keeps
// the order. ncclCommAbort, ncclCommDestroy, ncclCommRevoke and ncclCommGetAsyncError are
// not calls in this sense: any thread may make them at any time.
#pragma once

#include "src/comm/comm.h"

namespace chorus {

// Whether `comm` may take a call: not failed, revoked, finalized or suspended (a WARN says
// which).
ncclResult_t checkAcceptsWork(const ncclComm* comm);

// For work queued behind `comm`'s own set-up (in its group, or before it on a non-blocking
// communicator's worker), which runs only where that set-up succeeded: ncclSuccess if it
// did, else the set-up's error (ncclInvalidUsage where none is recorded) and a WARN that
// `what` did not run.
ncclResult_t checkSetUp(const ncclComm* comm, const char* what);

// Takes `comm` for the calls of `group` (a thread's group state, opaque here). ncclSuccess
// when `group` holds it now, `*fresh` when it did not before; otherwise a WARN and
// ncclInvalidUsage, and the communicator is unharmed.
ncclResult_t claimForCalls(ncclComm* comm, const void* group, bool* fresh);
// Lets go of `comm` if `group` holds it.
void releaseForCalls(ncclComm* comm, const void* group);

}  // namespace chorus
