// Communicators made from another: ncclCommSplit, ncclCommShrink and ncclCommGrow (with
// ncclCommGetUniqueId); and ncclCommRevoke, which stops a communicator's work so that it
// can be shrunk past a dead or stuck rank.
//
// Each maker is one job of the parent's (ordered with its other calls: its worker runs it
// when it is non-blocking, the group's end inside a group): an exchange over the parent's
// bootstrap (src/comm/derived_comm.h), then the new communicator's set-up from its outcome.
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/debug.h"
#include "src/api/config.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/bootstrap/bootstrap.h"
#include "src/comm/call_admission.h"
#include "src/comm/derived_comm.h"
#include "src/comm/shared_connections.h"
#include "src/group/group.h"

using namespace chorus;

namespace {

// The new communicator counts as being set up (ncclComm::initThreads, as an init's own
// communicator does) from its making until its set-up job has run or been dropped: it may
// be published before then (a non-blocking parent, a group), and an abort meanwhile only
// marks it `abandoned`. Whoever ends the set-up then frees it, once: nothing frees it under
// the job.
void childSetUpEnds(ncclComm* child) {
  bool abandoned = false;
  {
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    abandoned = --child->initThreads == 0 && child->abandoned;
  }
  if (abandoned) freeComm(child);
}

// The communicator a job of the parent's sets up; marked failed if the job is dropped unrun
// (its group failed), so that polling it ends.
struct ChildSetUp {
  ncclComm* child = nullptr;  // null: this rank is not a member
  bool ran = false;
  ~ChildSetUp() {
    if (child == nullptr || ran) return;
    child->asyncResult.store(ncclInvalidUsage);
    childSetUpEnds(child);
  }
};

using Exchange = std::function<ncclResult_t(SplitPlacement*)>;

// Runs `exchange` and then (when this rank is a `member`) the new communicator's set-up
// with `config`, both as one job of `parent`'s, as in NCCL: once the parent's call has
// completed (a non-blocking parent has settled), the new communicator is ready. `share`:
// it asks to share the parent's connections (src/comm/shared_connections.h).
ncclResult_t deriveComm(ncclComm* parent, const CommConfig& config, bool member, bool share, Exchange exchange,
                        ncclComm_t* newcomm) {
  std::unique_ptr<ncclComm> child;
  auto setUp = std::make_shared<ChildSetUp>();
  if (member && share) SharedConnections::offer(parent);
  if (member) {
    child = std::make_unique<ncclComm>();
    child->cudaDev = parent->cudaDev;
    // The parent's executor: its buffers are of that kind.
    child->executorChoice.store(parent->executorChoice.load());
    child->executorAskedBy = parent->executorAskedBy;
    child->config = config;
    child->asyncResult.store(ncclInProgress);
    setUp->child = child.get();
    std::lock_guard<std::mutex> lock(commLifecycleMutex());
    ++child->initThreads;  // until childSetUpEnds
  }
  const ncclResult_t exchanged = enqueueInit(
      parent,
      [parent, share, exchange = std::move(exchange), setUp] {
        setUp->ran = true;
        SplitPlacement placement;
        // Queued behind the parent's own set-up (a non-blocking parent, a group): nothing to
        // exchange over where that failed.
        ncclResult_t r = checkSetUp(parent, "a split, shrink or grow");
        if (r == ncclSuccess) r = exchange(&placement);
        ncclComm* made = setUp->child;
        if (made == nullptr) return r;
        ncclResult_t result = r;  // a failed exchange has named its cause
        if (r == ncclSuccess) {
          made->rank = placement.rank;
          made->nranks = placement.nranks;
          {
            std::lock_guard<std::mutex> lock(commLifecycleMutex());
            parent->childInSetUp = made;
            if (parent->abortFlag.load() != 0) made->abortFlag.store(1);  // the parent's abort came first
          }
          // The parent's family was offered at the call (a member asking to share).
          const bool lends =
              share && parent->revokeFlag.load() == 0 && SharedConnections::lendable(parent, placement.members);
          made->lender = lends ? parent : nullptr;
          result = initCommunicator(made, placement.id);
          made->lender = nullptr;
          std::lock_guard<std::mutex> lock(commLifecycleMutex());
          parent->childInSetUp = nullptr;  // before childSetUpEnds, which may free it
        }
        int expected = ncclInProgress;  // an error recorded meanwhile (used too early) stays
        made->asyncResult.compare_exchange_strong(expected, result);
        childSetUpEnds(made);  // last: an abort during the set-up frees it here
        return r;              // the parent's own state: a failed set-up belongs to the new communicator
      },
      InitKind::kOfParent);
  setUp.reset();
  // The call itself answers ncclSuccess for a non-blocking parent, as NCCL's: the child is
  // ready once the parent has settled (or the group has ended).
  const ncclResult_t answer = exchanged == ncclInProgress ? ncclSuccess : exchanged;
  if (!member || answer != ncclSuccess) return answer;
  // Only a set-up that ran on this thread has ended here: one on the parent's worker may
  // still hold the child (childSetUpEnds), which then reports its own error when polled.
  const int childResult = exchanged == ncclInProgress ? ncclInProgress : child->asyncResult.load();
  if (childResult != ncclSuccess && childResult != ncclInProgress) {
    freeComm(child.release());  // a blocking set-up failed; nobody else has seen it
    return static_cast<ncclResult_t>(childResult);
  }
  *newcomm = child.release();
  return answer;
}

// The parent's config when none is given (as NCCL), else `config`.
ncclResult_t childConfig(const ncclComm* parent, const ncclConfig_t* config, CommConfig* out, const char* func) {
  *out = parent->config;
  return config != nullptr ? parseConfig(config, out, func) : ncclSuccess;
}

// A finalized communicator takes no more jobs, as no more calls (call_admission.h).
ncclResult_t checkNotFinalized(const ncclComm* comm, const char* func) {
  if (!comm->finalized.load()) return ncclSuccess;
  WARN("%s: communicator %p (rank %d) is finalized (ncclCommFinalize): it can only be destroyed", func,
       static_cast<const void*>(comm), comm->rank);
  return ncclInvalidUsage;
}

ncclResult_t checkHealthy(const ncclComm* comm, const char* func) {
  const int async = comm->asyncResult.load();
  if (async == ncclSuccess || async == ncclInProgress) return ncclSuccess;
  WARN(
      "%s: communicator %p (rank %d) has failed earlier (%s); revoke it (ncclCommRevoke) or shrink it with "
      "NCCL_SHRINK_ABORT",
      func, static_cast<const void*>(comm), comm->rank, ncclGetErrorString(static_cast<ncclResult_t>(async)));
  return static_cast<ncclResult_t>(async);
}

// Stops `comm`'s work and waits until it is quiescent: its running collectives fail, its
// queued ones fail at their first wait, and the communicator reads healthy again (its
// bootstrap is untouched, for split and shrink).
void revokeWork(ncclComm* comm) {
  comm->haltWork(comm->revokeFlag);
  if (comm->worker) comm->worker->waitIdle();
  if (comm->ready.load()) comm->asyncResult.store(ncclSuccess);  // a failed set-up's error stays
}

// Every color but NCCL_SPLIT_NOCOLOR is an ordinary one, negative ones too (as NCCL).
ncclResult_t split(const CommCall& held, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                   ncclConfig_t* config) {
  const char* func = "ncclCommSplit";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotFinalized(comm, func));
  CHORUS_CHECK(checkHealthy(comm, func));
  CommConfig parsed;
  CHORUS_CHECK(childConfig(comm, config, &parsed, func));
  // Shared where the parent's config or the split's asks (NCCL reads the parent's).
  const bool share = comm->config.splitShare || parsed.splitShare;
  return deriveComm(
      comm, parsed, color != NCCL_SPLIT_NOCOLOR, share,
      [comm, color, key](SplitPlacement* placement) { return exchangeSplit(comm, color, key, placement); }, newcomm);
}

ncclResult_t shrink(const CommCall& held, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                    ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* func = "ncclCommShrink";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotFinalized(comm, func));
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN("%s: invalid argument: shrinkFlags 0x%x is neither NCCL_SHRINK_DEFAULT nor NCCL_SHRINK_ABORT", func,
         shrinkFlags);
    return ncclInvalidArgument;
  }
  if (excludeRanksCount < 1 || excludeRanksCount >= comm->nranks) {
    WARN("%s: invalid argument: excludeRanksCount %d must be in [1, %d) (the communicator has %d ranks)", func,
         excludeRanksCount, comm->nranks, comm->nranks);
    return ncclInvalidArgument;
  }
  CHORUS_CHECK(checkNotNull(excludeRanksList, "excludeRanksList", func));
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  for (int i = 0; i < excludeRanksCount; ++i) {
    CHORUS_CHECK(checkRank(excluded[i], comm->nranks, "excludeRanksList[i]", func));
    if (std::count(excluded.begin(), excluded.end(), excluded[i]) > 1) {
      WARN("%s: invalid argument: rank %d is listed twice in excludeRanksList", func, excluded[i]);
      return ncclInvalidArgument;
    }
    if (excluded[i] == comm->rank) {
      WARN("%s: invalid argument: rank %d is in its own excludeRanksList (excluded ranks do not call ncclCommShrink)",
           func, comm->rank);
      return ncclInvalidArgument;
    }
  }
  CommConfig parsed;
  CHORUS_CHECK(childConfig(comm, config, &parsed, func));
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    revokeWork(comm);  // in-flight work may wait on an excluded rank that is dead or stuck
  } else {
    CHORUS_CHECK(checkHealthy(comm, func));
  }
  // Never after NCCL_SHRINK_ABORT (as NCCL): the parent's connections may be stuck.
  const bool share = shrinkFlags == NCCL_SHRINK_DEFAULT && (comm->config.shrinkShare || parsed.shrinkShare);
  return deriveComm(
      comm, parsed, /*member=*/true, share,
      [comm, excluded](SplitPlacement* placement) {
        // Counted as the exchange runs, under the communicator's claim: a shrink refused
        // before it (another thread holds the communicator) leaves the count as it was.
        const int sequence = comm->shrinks++;
        return exchangeShrink(comm, excluded, sequence, placement);
      },
      newcomm);
}

// Grow, on an existing rank (the new ranks join with ncclCommInitRankConfig's path).
ncclResult_t growExisting(const CommCall& held, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* func = "ncclCommGrow";
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotFinalized(comm, func));
  if (rank != -1) {
    WARN("%s: invalid argument: rank %d given by an existing rank (rank %d of comm %p keeps its rank: pass -1)", func,
         rank, comm->rank, static_cast<void*>(comm));
    return ncclInvalidArgument;
  }
  if (nRanks <= comm->nranks) {
    WARN("%s: invalid argument: nRanks %d must be larger than the communicator's %d ranks", func, nRanks, comm->nranks);
    return ncclInvalidArgument;
  }
  CHORUS_CHECK(checkHealthy(comm, func));
  CommConfig parsed;
  CHORUS_CHECK(childConfig(comm, config, &parsed, func));
  std::optional<ncclUniqueId> id;
  if (uniqueId != nullptr) id = *uniqueId;
  // Shares nothing: the new ranks' connections are new, and NCCL shares none either.
  return deriveComm(
      comm, parsed, /*member=*/true, /*share=*/false,
      [comm, id, nRanks](SplitPlacement* placement) {
        return exchangeGrow(comm, id ? &*id : nullptr, nRanks, placement);
      },
      newcomm);
}

ncclResult_t grow(const CommCall& held, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                  ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* func = "ncclCommGrow";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  if (comm != nullptr) return growExisting(held, comm, nRanks, uniqueId, rank, newcomm, config);
  // A new rank: it joins as ncclCommInitRank would, at the rank it names.
  CHORUS_CHECK(checkNotNull(uniqueId, "uniqueId (a new rank needs the id)", func));
  if (rank < 0 || rank >= nRanks) {
    WARN("%s: invalid argument: rank %d of a new rank must be in [0, %d)", func, rank, nRanks);
    return ncclInvalidArgument;
  }
  return pncclCommInitRankConfig(newcomm, nRanks, *uniqueId, rank, config);
}

}  // namespace

extern "C" {

ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  const char* func = "ncclCommGetUniqueId";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(uniqueId, "uniqueId", func));
  // A root of this rank's own, fresh per call, whatever NCCL_COMM_ID says (that is the parent's).
  return bootstrapGetUniqueId(uniqueId, RootPlacement::kFresh);
}

ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  const CommCall held(comm);
  return groupRecorded(grow(held, comm, nRanks, uniqueId, rank, newcomm, config));
}

// An argument refused inside a group fails the group's end too, as in NCCL.
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const CommCall held(comm);
  return groupRecorded(split(held, comm, color, key, newcomm, config));
}

ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  const CommCall held(comm);
  return groupRecorded(shrink(held, comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
}

// Local, as in NCCL: revoking NULL is a no-op, a communicator is revoked once, and a
// non-blocking one answers ncclInProgress (its work has stopped when the call returns, so
// polling sees ncclSuccess at once).
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const char* func = "ncclCommRevoke";
  if (comm == nullptr) return ncclSuccess;
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("%s: invalid argument: revokeFlags 0x%x must be NCCL_REVOKE_DEFAULT (0)", func, revokeFlags);
    return ncclInvalidArgument;
  }
  if (comm->revokeFlag.load() != 0) {
    WARN("%s: invalid argument: communicator %p (rank %d) is already revoked", func, static_cast<void*>(comm),
         comm->rank);
    return ncclInvalidArgument;
  }
  revokeWork(comm);
  INFO(kSubsysInit, "comm %p rank %d nRanks %d - Revoke COMPLETE", static_cast<void*>(comm), comm->rank, comm->nranks);
  return comm->config.blocking ? ncclSuccess : ncclInProgress;
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclCommSplit)
CHORUS_EXPORT_ALIAS(ncclCommShrink)
CHORUS_EXPORT_ALIAS(ncclCommRevoke)
CHORUS_EXPORT_ALIAS(ncclCommGetUniqueId)
CHORUS_EXPORT_ALIAS(ncclCommGrow)
