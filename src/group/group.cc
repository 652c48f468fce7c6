#include "src/group/group.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "core/debug.h"
#include "core/thread_name.h"
#include "src/comm/call_admission.h"
#include "src/comm/shared_connections.h"
#include "src/enqueue/plan.h"
#include "src/executor/executor.h"
#include "src/group/group_jobs.h"
#include "src/group/launch_run.h"
#include "src/profiler/profiler.h"
#include "src/tune/tuner.h"

namespace chorus {
namespace {

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;
  std::vector<ncclComm*> comms;  // with pending ops, in first-use order
  std::vector<InitJob> inits;
  std::vector<RmaJob> rmaBefore;  // one-sided calls (RmaPhase), in call order
  std::vector<RmaJob> rmaAfter;
  GroupApiEvent groupApi;  // a profiler plugin's event for this outermost group
  // The communicators an open group holds work of, with their serials. Between the calls
  // that queued the work and the group's end, another thread may destroy one; the end pins
  // each (comm_registry.h) and holds the pins while it runs.
  std::vector<std::pair<ncclComm*, uint64_t>> held;
  std::vector<CommPin> pins;
  std::vector<ncclComm*> claimed;  // whose callingGroup is this group, until it has run their calls
  // Scratch of launchGroup and runBlocking, kept so that a warm call allocates nothing.
  std::vector<ncclComm*> blocking;
  GroupLaunch launch;

  // A thread that ends inside a group: its calls never run, and its communicators are let
  // go (a later thread whose state lands at this address must not find them claimed as
  // its own, with calls queued by a stack that is gone).
  ~GroupState();
};
thread_local GroupState tGroup;

// This thread's group state, looked up once per API call: behind an opaque call, GCC
// otherwise recomputes the thread-local address (__tls_get_addr) at every use.
[[gnu::noinline]] GroupState& currentGroup() { return tGroup; }

// Inside an open group, notes that the group holds work of `comm` (a lone call's pin
// covers its implicit group). The caller holds a pin on `comm`. Held at an address under
// another serial: the communicator the group held work of was freed by another thread and
// this is a new one; the group fails at its end (its work, now queued on the new one, is
// dropped there: nothing of it may run later as the new one's).
void hold(GroupState& g, ncclComm* comm) {
  if (g.depth == 0) return;
  for (auto& entry : g.held) {
    if (entry.first != comm) continue;
    if (entry.second != comm->serial) {
      WARN(
          "ncclGroupEnd: invalid usage: communicator %p was destroyed or aborted by another thread while this "
          "thread's group held calls of it, and a new communicator now has its address; the group fails",
          static_cast<void*>(comm));
      entry.second = comm->serial;
      if (g.error == ncclSuccess) g.error = ncclInvalidUsage;
    }
    return;
  }
  g.held.emplace_back(comm, comm->serial);
}

// This thread's group takes `comm` for its calls (call_admission.h), noting it to let go.
ncclResult_t claim(GroupState& g, ncclComm* comm) {
  bool fresh = false;
  CHORUS_CHECK(claimForCalls(comm, &g, &fresh));
  if (fresh) g.claimed.push_back(comm);
  return ncclSuccess;
}

// The group has run (or dropped) its calls: their communicators take other threads' again.
void releaseClaims(GroupState& g) {
  for (ncclComm* comm : g.claimed) releaseForCalls(comm, &g);
  g.claimed.clear();
}

// Drops the group's work of `comm` without touching the communicator.
void forgetWorkOf(GroupState& g, const ncclComm* comm) {
  auto ofComm = [comm](const auto& job) { return job.comm == comm; };
  std::erase(g.comms, comm);
  std::erase(g.claimed, comm);
  std::erase_if(g.inits, ofComm);
  std::erase_if(g.rmaBefore, ofComm);
  std::erase_if(g.rmaAfter, ofComm);
}

// At the outermost group end: pins every communicator the group holds work of. One that
// another thread destroyed meanwhile loses its work (its memory is not touched) and fails
// the group, as a refused call inside it would.
void pinHeld(GroupState& g) {
  g.pins.clear();
  for (const auto& [comm, serial] : g.held) {
    CommPin pin(comm, serial);
    if (pin) {
      g.pins.push_back(std::move(pin));
      continue;
    }
    WARN(
        "ncclGroupEnd: invalid usage: communicator %p was destroyed or aborted by another thread while this thread's "
        "group held calls of it; the group's work is dropped",
        static_cast<void*>(comm));
    forgetWorkOf(g, comm);
    if (g.error == ncclSuccess) g.error = ncclInvalidUsage;
  }
  g.held.clear();
}

// Lets go of this thread's pin on `comm` before it is freed here.
void unpin(GroupState& g, const ncclComm* comm) {
  std::erase_if(g.pins, [comm](const CommPin& pin) { return pin.get() == comm; });
}

// A non-blocking communicator's calls, on its worker.
ncclResult_t runPending(ncclComm* comm, std::vector<CollOp> ops, RunTurns& turns) {
  comm->running = std::move(ops);
  return runBlocking({comm}, currentGroup().launch, turns);
}

ncclResult_t launchGroup(GroupState& g) {
  ncclResult_t result = ncclSuccess;
  bool inProgress = false;

  // Deferred inits: concurrently, since the ranks of one group wait for each other; the
  // jobs of one communicator (several splits of one parent) in order, on one thread.
  std::vector<std::thread> threads;
  std::vector<ncclResult_t> initResults(g.inits.size(), ncclSuccess);
  std::vector<std::string> initErrors(g.inits.size());  // the WARN behind a failed init, for the caller
  std::vector<bool> started(g.inits.size(), false);
  for (size_t i = 0; i < g.inits.size(); ++i) {
    ncclComm* comm = g.inits[i].comm;
    if (!comm->config.blocking) {
      submitAsync(comm, std::move(g.inits[i].run));
      inProgress = true;
      continue;
    }
    if (started[i]) continue;
    std::vector<size_t> mine;
    for (size_t j = i; j < g.inits.size(); ++j) {
      if (g.inits[j].comm != comm) continue;
      mine.push_back(j);
      started[j] = true;
    }
    threads.emplace_back([&, mine, comm] {
      nameThisThread("NCCL Init");
      for (size_t j : mine) {
        initResults[j] = runInitJob(comm, g.inits[j].kind, g.inits[j].run);
        if (initResults[j] != ncclSuccess) {
          initErrors[j] = lastErrorText();
          break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t j = 0; j < initResults.size(); ++j) {
    if (initResults[j] == ncclSuccess || result != ncclSuccess) continue;
    result = initResults[j];
    if (!initErrors[j].empty()) setThreadLastError(initErrors[j].c_str());
  }
  // Communicators aborted during their set-up were left to this thread to free (one own
  // set-up job each).
  std::vector<ncclComm*> abandoned;
  for (const InitJob& job : g.inits)
    if (job.kind == InitKind::kOwn && job.comm->config.blocking && job.comm->abandoned) abandoned.push_back(job.comm);
  g.inits.clear();
  for (ncclComm* comm : abandoned) {
    forgetWorkOf(g, comm);
    const uint64_t serial = comm->serial;  // read under the pin
    unpin(g, comm);
    freeComm(comm, serial);  // false: another thread's destroy or abort closed it first, and frees it
  }
  if (const ncclResult_t r = runRmaJobs(g.rmaBefore, &inProgress); result == ncclSuccess) result = r;

  std::vector<ncclComm*>& blocking = g.blocking;
  blocking.clear();
  std::vector<ncclComm*> async;
  for (ncclComm* comm : g.comms)
    if (!comm->pending.empty()) (comm->config.blocking ? blocking : async).push_back(comm);
  g.comms.clear();
  // Turns among communicators sharing connections are taken now, in the order the calls
  // were made, not when a worker gets to them.
  RunTurns blockingTurns;
  std::vector<std::shared_ptr<RunTurns>> asyncTurns;
  takeTurns(blocking, async, blockingTurns, asyncTurns);
  for (size_t i = 0; i < async.size(); ++i) {
    ncclComm* comm = async[i];
    auto ops = std::move(comm->pending);
    comm->pending.clear();
    submitAsync(comm, [comm, ops = std::move(ops), turns = asyncTurns[i]]() mutable {
      return runPending(comm, std::move(ops), *turns);
    });
    inProgress = true;
  }
  for (ncclComm* comm : blocking) comm->running.swap(comm->pending);  // the swap keeps both allocations
  if (!blocking.empty()) {
    ncclResult_t r = runBlocking(blocking, g.launch, blockingTurns);
    if (result == ncclSuccess) result = r;
  }
  if (const ncclResult_t r = runRmaJobs(g.rmaAfter, &inProgress); result == ncclSuccess) result = r;
  releaseClaims(g);
  if (result == ncclSuccess && inProgress) result = ncclInProgress;
  return result;
}

void dropPending(GroupState& g) {
  for (ncclComm* comm : g.comms) comm->pending.clear();
  g.comms.clear();
  for (InitJob& job : g.inits)
    if (job.kind == InitKind::kOwn) job.comm->asyncResult.store(ncclInvalidUsage);
  g.inits.clear();
  g.rmaBefore.clear();
  g.rmaAfter.clear();
  releaseClaims(g);
}

// The outermost group's recorded failure, taken: its work is dropped, so the group ends
// without running anything. ncclSuccess when no call inside it failed.
ncclResult_t takeFailure(GroupState& g) {
  const ncclResult_t failure = g.error;
  if (failure != ncclSuccess) {
    g.error = ncclSuccess;
    dropPending(g);
  }
  return failure;
}

}  // namespace

GroupState::~GroupState() {
  if (depth == 0 && claimed.empty()) return;
  WARN("ncclGroupStart without ncclGroupEnd: a thread ended inside a group (depth %d); its calls are dropped", depth);
  GroupApiEnd apiEnd(groupApi);  // a profiler plugin sees the group end, as after a failed ncclGroupEnd
  pinHeld(*this);
  dropPending(*this);
  pins.clear();
  depth = 0;
}

ncclResult_t groupStart() {
  ++currentGroup().depth;
  return ncclSuccess;
}

ncclResult_t groupEnd() {
  GroupState& g = currentGroup();
  if (g.depth == 0) {
    WARN("ncclGroupEnd: not in a group (ncclGroupEnd without ncclGroupStart)");
    return ncclInvalidUsage;
  }
  if (--g.depth > 0) return ncclSuccess;
  GroupApiEnd apiEnd(g.groupApi);
  pinHeld(g);
  ncclResult_t result = takeFailure(g);
  if (result != ncclSuccess) {
    WARN("ncclGroupEnd: a call inside the group failed (%s); the group's work was dropped", ncclGetErrorString(result));
  } else {
    result = launchGroup(g);
  }
  g.pins.clear();
  return result;
}

// As NCCL's: a NULL simInfo makes this a plain ncclGroupEnd (the group runs), a nested
// one closes its level, and an invalid simInfo fails the group (its work is dropped and it
// is closed: nothing of it may run later as another call's).
ncclResult_t groupSimulateEnd(ncclSimInfo_t* info) {
  if (info == nullptr) return groupEnd();
  GroupState& g = currentGroup();
  if (g.depth == 0) {
    WARN("ncclGroupSimulateEnd: invalid usage: not in a group (ncclGroupSimulateEnd without ncclGroupStart)");
    return ncclInvalidUsage;
  }
  if (--g.depth > 0) return ncclSuccess;
  if ((info->magic != 0x74685283u || info->size < sizeof(ncclSimInfo_t)) && g.error == ncclSuccess) {
    WARN(
        "ncclGroupSimulateEnd: invalid argument: simInfo magic 0x%x size %zu (initialize it with "
        "NCCL_SIM_INFO_INITIALIZER); the group's work is dropped",
        info->magic, info->size);
    g.error = ncclInvalidArgument;
  }
  GroupApiEnd apiEnd(g.groupApi);
  pinHeld(g);
  if (const ncclResult_t failure = takeFailure(g); failure != ncclSuccess) {
    g.pins.clear();
    return failure;
  }
  // Every communicator's calls run concurrently with the others': the group takes as
  // long as its slowest communicator. Nothing is executed.
  float estimate = 0;
  for (ncclComm* comm : g.comms) {
    const ScopedLogContext logAs(comm->rank, comm->config.commName);
    std::vector<TuneRequest> calls;
    for (const CollOp& op : comm->pending)
      calls.push_back(TuneRequest{collKindOf(op.kind), tunedBytes(comm, op), op.tuning});
    estimate = std::max(estimate, simulateGroupTimeUs(*comm->tuner, calls));
    comm->pending.clear();
  }
  g.comms.clear();
  g.rmaBefore.clear();  // one-sided calls are not simulated, and do not run either
  g.rmaAfter.clear();
  ncclResult_t result = ncclSuccess;
  info->estimatedTime = estimate;
  INFO(kSubsysTuning, "ncclGroupSimulateEnd: estimated %.2f us", estimate);
  if (!g.inits.empty()) result = launchGroup(g);  // pending inits still happen
  releaseClaims(g);                               // (launchGroup's own, if it ran)
  g.pins.clear();
  return result;
}

void groupRecordError(ncclResult_t result) {
  GroupState& g = currentGroup();
  if (g.depth > 0 && g.error == ncclSuccess) g.error = result;
}

namespace {

// A call's refusal, which also fails the group it is in.
ncclResult_t failsGroup(ncclResult_t r) {
  groupRecordError(r);
  return r;
}

// Whether `comm` takes a call now (call_admission.h), and from this thread's group, which
// then holds it; a refusal fails the group too.
ncclResult_t admitCall(GroupState& g, ncclComm* comm) {
  if (const ncclResult_t r = checkAcceptsWork(comm); r != ncclSuccess) return failsGroup(r);
  if (const ncclResult_t r = claim(g, comm); r != ncclSuccess) return failsGroup(r);
  return ncclSuccess;
}

}  // namespace

ncclResult_t checkReady(ncclComm* comm, const char* func, ReadyCheck what) {
  if (comm->ready.load()) return ncclSuccess;
  const GroupState& g = currentGroup();
  for (const InitJob& job : g.inits)
    if (job.comm == comm && job.kind == InitKind::kOwn) return ncclSuccess;
  WARN(
      "%s: communicator %p is not ready: its set-up has not finished (a non-blocking init or split returned "
      "ncclInProgress; poll ncclCommGetAsyncError until ncclSuccess first)",
      func, static_cast<void*>(comm));
  if (!comm->config.blocking && what == ReadyCheck::kCall) {
    std::lock_guard<std::mutex> lock(comm->asyncMutex);
    comm->asyncResult.store(ncclInvalidArgument);  // kept: the set-up's result no longer replaces it
  }
  return ncclInvalidArgument;
}

ncclResult_t enqueueOp(ncclComm* comm, const CollOp& op) {
  GroupState& g = currentGroup();
  CHORUS_CHECK(admitCall(g, comm));
  hold(g, comm);
  if (comm->pending.empty() && std::find(g.comms.begin(), g.comms.end(), comm) == g.comms.end())
    g.comms.push_back(comm);
  comm->pending.push_back(op);
  if (comm->profiler) comm->profiler->recordCall(g.groupApi, g.depth + 1, comm->pending.back());
  if (g.depth > 0) return ncclSuccess;
  GroupApiEnd apiEnd(g.groupApi);  // a lone call's implicit group
  return launchGroup(g);
}

ncclResult_t enqueueInit(ncclComm* comm, std::function<ncclResult_t()> init, InitKind kind) {
  GroupState& g = currentGroup();
  // A job of the parent's (split, shrink, grow, window registration) uses its bootstrap and
  // connections as its calls do: one thread at a time.
  if (kind == InitKind::kOfParent) {
    if (const ncclResult_t r = claim(g, comm); r != ncclSuccess) return failsGroup(r);
  }
  if (g.depth > 0) {
    comm->asyncResult.store(ncclInProgress);
    g.inits.push_back(InitJob{comm, std::move(init), kind});
    hold(g, comm);
    return ncclSuccess;
  }
  if (!comm->config.blocking) {
    submitAsync(comm, std::move(init));
    releaseClaims(g);
    return ncclInProgress;
  }
  const ncclResult_t r = runInitJob(comm, kind, init);
  releaseClaims(g);
  return r;
}

ncclResult_t enqueueRma(ncclComm* comm, RmaPhase phase, std::function<ncclResult_t()> job) {
  GroupState& g = currentGroup();
  CHORUS_CHECK(admitCall(g, comm));
  (phase == RmaPhase::kBeforeCollectives ? g.rmaBefore : g.rmaAfter).push_back(RmaJob{comm, std::move(job)});
  hold(g, comm);
  if (g.depth > 0) return ncclSuccess;
  return launchGroup(g);
}

bool groupHolds(const ncclComm* comm) {
  const GroupState& g = currentGroup();
  auto ofComm = [comm](const auto& job) { return job.comm == comm; };
  return std::find(g.comms.begin(), g.comms.end(), comm) != g.comms.end() ||
         std::any_of(g.inits.begin(), g.inits.end(), ofComm) ||
         std::any_of(g.rmaBefore.begin(), g.rmaBefore.end(), ofComm) ||
         std::any_of(g.rmaAfter.begin(), g.rmaAfter.end(), ofComm);
}

void groupForget(ncclComm* comm) {
  GroupState& g = currentGroup();
  // The calls queued are this thread's only where its group holds the communicator; another
  // thread's open group may be adding to them (an abort from a watchdog): that group finds
  // the communicator gone at its end and drops them (pinHeld).
  const bool mine = comm->callingGroup.load() == &g;
  forgetWorkOf(g, comm);
  std::erase_if(g.held, [comm](const auto& entry) { return entry.first == comm; });
  if (mine) {
    comm->pending.clear();
    releaseForCalls(comm, &g);
  }
}

}  // namespace chorus
