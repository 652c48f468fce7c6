// Communicators made from another: ncclCommSplit and ncclCommShrink, and ncclCommRevoke,
// which stops a communicator's work so that it can be shrunk past a dead or stuck rank.
//
// Both makers run in two parts (src/comm/derived_comm.h): an exchange over the parent's
// bootstrap, which is the parent's work (ordered with its other calls: its worker runs it
// when it is non-blocking, the group's end inside a group), then the new communicator's
// set-up, which waits for the exchange's outcome.
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "core/debug.h"
#include "src/api/config.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/comm/derived_comm.h"
#include "src/group/group.h"

using namespace chorus;

namespace {

// Holds an exchange's outcome for the job that runs it: if that job is dropped unrun (its
// group failed), the set-up waiting for the outcome learns so instead of waiting.
struct PendingExchange {
  std::shared_ptr<SplitOutcome> outcome = std::make_shared<SplitOutcome>();
  ~PendingExchange() { outcome->set(ncclInvalidUsage, SplitPlacement{}); }  // no-op once set
};

using Exchange = std::function<ncclResult_t(SplitPlacement*)>;

// Runs `exchange` as `parent`'s work, then (when this rank is a `member`) sets up the new
// communicator with `config` from its outcome.
ncclResult_t deriveComm(ncclComm* parent, const CommConfig& config, bool member, Exchange exchange, ncclComm_t* newcomm,
                        const char* func) {
  auto pending = std::make_shared<PendingExchange>();
  std::shared_ptr<SplitOutcome> outcome = pending->outcome;
  const ncclResult_t exchanged = enqueueInit(parent, [exchange = std::move(exchange), pending] {
    SplitPlacement placement;
    const ncclResult_t r = exchange(&placement);
    pending->outcome->set(r, placement);
    return r;
  });
  pending.reset();
  if (!member || (exchanged != ncclSuccess && exchanged != ncclInProgress)) return exchanged;

  auto child = std::make_unique<ncclComm>();
  child->cudaDev = parent->cudaDev;
  child->config = config;
  ncclComm* raw = child.get();
  *newcomm = raw;
  const ncclResult_t r = enqueueInit(raw, [raw, outcome, func] {
    SplitPlacement placement;
    const ncclResult_t exchange = outcome->wait(&placement);
    if (exchange != ncclSuccess) {
      WARN("%s: the exchange on the parent communicator failed or never ran (%s)", func, ncclGetErrorString(exchange));
      return exchange;
    }
    raw->rank = placement.rank;
    raw->nranks = placement.nranks;
    return initCommunicator(raw, placement.id);
  });
  if (r != ncclSuccess && r != ncclInProgress) {
    *newcomm = nullptr;
    return r;  // `child` is freed here: a blocking set-up failed
  }
  child.release();
  return r;  // a blocking child is ready; a non-blocking one is in progress
}

// The parent's config when none is given (as NCCL), else `config`.
ncclResult_t childConfig(const ncclComm* parent, const ncclConfig_t* config, CommConfig* out, const char* func) {
  *out = parent->config;
  return config != nullptr ? parseConfig(config, out, func) : ncclSuccess;
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
  comm->asyncResult.store(ncclSuccess);
}

}  // namespace

extern "C" {

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* func = "ncclCommSplit";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  CHORUS_CHECK(checkComm(comm, func));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    WARN("%s: invalid argument: color %d must be non-negative or NCCL_SPLIT_NOCOLOR (%d)", func, color,
         NCCL_SPLIT_NOCOLOR);
    return ncclInvalidArgument;
  }
  CHORUS_CHECK(checkHealthy(comm, func));
  CommConfig parsed;
  CHORUS_CHECK(childConfig(comm, config, &parsed, func));
  return deriveComm(
      comm, parsed, color != NCCL_SPLIT_NOCOLOR,
      [comm, color, key](SplitPlacement* placement) { return exchangeSplit(comm, color, key, placement); }, newcomm,
      func);
}

ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  const char* func = "ncclCommShrink";
  CHORUS_CHECK(checkNotNull(newcomm, "newcomm", func));
  *newcomm = nullptr;
  CHORUS_CHECK(checkComm(comm, func));
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN("%s: invalid argument: shrinkFlags 0x%x is neither NCCL_SHRINK_DEFAULT nor NCCL_SHRINK_ABORT", func,
         shrinkFlags);
    return ncclInvalidArgument;
  }
  if (excludeRanksCount < 0 || excludeRanksCount >= comm->nranks) {
    WARN("%s: invalid argument: excludeRanksCount %d must be in [0, %d) (the communicator has %d ranks)", func,
         excludeRanksCount, comm->nranks, comm->nranks);
    return ncclInvalidArgument;
  }
  if (excludeRanksCount > 0) CHORUS_CHECK(checkNotNull(excludeRanksList, "excludeRanksList", func));
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  for (int i = 0; i < excludeRanksCount; ++i) {
    CHORUS_CHECK(checkRank(excluded[i], comm->nranks, "excludeRanksList[i]", func));
    if (std::count(excluded.begin(), excluded.end(), excluded[i]) > 1) {
      WARN("%s: invalid argument: rank %d is listed twice in excludeRanksList", func, excluded[i]);
      return ncclInvalidArgument;
    }
    if (excluded[i] == comm->rank) {
      WARN("%s: invalid usage: rank %d is in its own excludeRanksList (excluded ranks do not call ncclCommShrink)",
           func, comm->rank);
      return ncclInvalidUsage;
    }
  }
  CommConfig parsed;
  CHORUS_CHECK(childConfig(comm, config, &parsed, func));
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    revokeWork(comm);  // in-flight work may wait on an excluded rank that is dead or stuck
  } else {
    CHORUS_CHECK(checkHealthy(comm, func));
  }
  const int sequence = comm->shrinks++;
  return deriveComm(
      comm, parsed, /*member=*/true,
      [comm, excluded, sequence](SplitPlacement* placement) {
        return exchangeShrink(comm, excluded, sequence, placement);
      },
      newcomm, func);
}

ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const char* func = "ncclCommRevoke";
  CHORUS_CHECK(checkComm(comm, func));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("%s: invalid argument: revokeFlags 0x%x must be NCCL_REVOKE_DEFAULT (0)", func, revokeFlags);
    return ncclInvalidArgument;
  }
  revokeWork(comm);
  INFO(kSubsysInit, "comm %p rank %d nRanks %d - Revoke COMPLETE", static_cast<void*>(comm), comm->rank, comm->nranks);
  return ncclSuccess;
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclCommSplit)
CHORUS_EXPORT_ALIAS(ncclCommShrink)
CHORUS_EXPORT_ALIAS(ncclCommRevoke)
