// Groups: ncclGroupStart/End (nested), the implicit group around a lone call, and
// the launch of everything a group collected.
//
// Inside a group, calls only record work on their communicator. At the outermost
// ncclGroupEnd: deferred communicator inits run (concurrently, one thread each);
// then every blocking communicator's work runs on the calling thread — all their
// lanes together, so one thread can drive all ranks of ncclCommInitAll — and each
// non-blocking communicator's work is handed to its worker (ncclInProgress).
#pragma once

#include <functional>

#include "src/comm/comm.h"
#include "src/enqueue/op.h"

namespace chorus {

ncclResult_t groupStart();
ncclResult_t groupEnd();
// Ends the outermost group without running its calls; reports the model's estimate (us).
ncclResult_t groupSimulateEnd(ncclSimInfo_t* info);

// Records a validated op; outside a group it runs at once.
ncclResult_t enqueueOp(ncclComm* comm, const CollOp& op);

// Whose set-up a job is: `comm`'s own (ncclCommInitRank*), or a communicator that a job
// of `comm`'s makes (ncclCommSplit, ncclCommShrink) and whose state the job keeps itself.
enum class InitKind { kOwn, kOfParent };

// Runs a communicator init now, or at the group's end when inside a group.
ncclResult_t enqueueInit(ncclComm* comm, std::function<ncclResult_t()> init, InitKind kind = InitKind::kOwn);

// When a one-sided call (src/rma) runs among the calls of its group: puts and signals
// before the group's collectives, waits after them, so that no order of calls inside a
// group (a wait listed before the put it waits for, on one thread) deadlocks.
enum class RmaPhase { kBeforeCollectives, kAfterCollectives };

// Runs a one-sided call's `job` now (on the worker for a non-blocking communicator), or at
// the group's end when inside a group. A failure is sticky on the communicator.
ncclResult_t enqueueRma(ncclComm* comm, RmaPhase phase, std::function<ncclResult_t()> job);

// Whether `comm` takes calls now: its set-up has finished, or it is pending in this
// thread's group (the group's end runs it before the calls). A refusal WARNs. A refused
// collective or send/receive (`call`) also stays a non-blocking communicator's error, as
// NCCL's enqueue keeps it; a refused query (ncclCommCount, ...) changes nothing, as NCCL's
// ncclCommEnsureReady.
enum class ReadyCheck { kCall, kQuery };
ncclResult_t checkReady(ncclComm* comm, const char* func, ReadyCheck what = ReadyCheck::kCall);

// An argument error inside a group fails the whole group at ncclGroupEnd.
void groupRecordError(ncclResult_t result);
// Records `result` when it is an error (see groupRecordError) and returns it.
inline ncclResult_t groupRecorded(ncclResult_t result) {
  if (result != ncclSuccess && result != ncclInProgress) groupRecordError(result);
  return result;
}

// Whether this thread's open group holds work of `comm`: calls, a set-up or other job of
// its own, one-sided calls (ncclCommDestroy refuses such a communicator).
bool groupHolds(const ncclComm* comm);
// Drops what this thread's open group holds of `comm` (ncclCommAbort).
void groupForget(ncclComm* comm);

// Runs a non-blocking communicator's job on its worker, tracking asyncResult.
void submitAsync(ncclComm* comm, std::function<ncclResult_t()> job);

}  // namespace chorus
