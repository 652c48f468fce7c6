#include "src/group/launch_run.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <vector>

#include "core/debug.h"
#include "src/comm/call_admission.h"
#include "src/executor/executor_choice.h"
#include "src/profiler/profiler.h"

namespace chorus {
namespace {

// Stages the calls of `comms` (each one's `running`) with their executors, then starts them
// together (executor.h); `result`: a failure before, which stages nothing. Returns the first
// failure; a communicator whose work failed is failed for good.
ncclResult_t runRound(const std::vector<ncclComm*>& comms, GroupLaunch& launch, ncclResult_t result) {
  launch.clear();
  for (ncclComm* comm : comms) {
    const ScopedLogContext logAs(comm->rank, comm->config.commName);
    if (comm->profiler) comm->profiler->beforePlanning(comm->running);
    for (CollOp& op : comm->running)
      if (op.staged) op.staged->take();  // before any of the launch's receives writes
    if (result == ncclSuccess) result = executorFor(comm).stage(comm, comm->running, launch);
  }
  // A profiler's launch events start once everything is staged and stop once the launch
  // has returned: what ran on this thread has completed by then. The calls' copies of
  // their data (CollOp::staged) are kept until then too.
  std::vector<std::shared_ptr<StagedCopy>> copies;
  for (ncclComm* comm : comms) {
    if (comm->profiler && result == ncclSuccess)
      comm->profiler->launchBegins(comm->running, comm->executor->runsOnCallingThread());
    for (CollOp& op : comm->running)
      if (op.staged) copies.push_back(std::move(op.staged));
    comm->running.clear();
  }
  // Everything is staged before anything starts (cuda_comm.h says why).
  const ncclResult_t started = launch.start(result == ncclSuccess);
  if (result == ncclSuccess) result = started;
  for (ncclComm* comm : comms) {
    if (comm->profiler) comm->profiler->launchEnded();
    const ncclResult_t r = comm->executor ? comm->executor->runError() : ncclSuccess;
    comm->flight.finished(result != ncclSuccess ? result : r);
    if (r != ncclSuccess) {
      comm->asyncResult.store(r);  // sticky: the communicator is broken, as in NCCL
      comm->breakConnections();
      if (result == ncclSuccess) result = static_cast<ncclResult_t>(r);
    }
  }
  return result;
}

// Whether `ops` run on their communicator's channels (ring and tree connections), which
// communicators sharing connections take turns on: any call but Send and Recv.
bool usesChannels(const std::vector<CollOp>& ops) {
  return std::any_of(ops.begin(), ops.end(), [](const CollOp& op) { return !isPointToPoint(op.kind); });
}

}  // namespace

ncclResult_t runBlocking(const std::vector<ncclComm*>& all, GroupLaunch& launch, RunTurns& turns) {
  // However the run ends: the job holding a non-blocking launch's turns may outlive it.
  const auto endTurns = [](RunTurns* t) { t->end(); };
  const std::unique_ptr<RunTurns, decltype(endTurns)> turnsEnd(&turns, endTurns);
  // Calls queued behind a set-up that failed (an init in the same group, or before them on
  // a non-blocking communicator's worker) have no communicator to run on: they fail with
  // the set-up's error, and the others run.
  ncclResult_t notSetUp = ncclSuccess;
  std::vector<ncclComm*> setUp;
  const bool allReady = std::all_of(all.begin(), all.end(), [](const ncclComm* c) { return c->ready.load(); });
  if (!allReady) {
    for (ncclComm* comm : all) {
      const ncclResult_t failed = checkSetUp(comm, "the collective and send/receive calls");
      if (failed == ncclSuccess) {
        setUp.push_back(comm);
        continue;
      }
      if (notSetUp == ncclSuccess) notSetUp = failed;
      comm->running.clear();
    }
    if (setUp.empty()) return notSetUp;
  }
  const std::vector<ncclComm*>& comms = allReady ? all : setUp;
  for (ncclComm* comm : comms) comm->activeRuns.fetch_add(1);
  ncclResult_t result = turns.await();
  if (result == ncclSuccess) {
    result = connectPendingPeers(comms);
    if (result != ncclSuccess) {
      // A connection that could not be made fails the communicators for good, and their
      // peers learn it from their connections now rather than at their timeouts.
      for (ncclComm* comm : comms) {
        comm->asyncResult.store(result);
        comm->breakConnections();
      }
    }
  }
  // Communicators sharing connections in one launch run in rounds, one member of a family
  // per round (shared_connections.h); every other launch is one round.
  if (!RunTurns::anyFamilyTwice(comms)) {
    result = runRound(comms, launch, result);
  } else {
    for (const std::vector<ncclComm*>& round : RunTurns::rounds(comms)) result = runRound(round, launch, result);
  }
  for (ncclComm* comm : comms) comm->activeRuns.fetch_sub(1);
  return result != ncclSuccess ? result : notSetUp;
}

void takeTurns(const std::vector<ncclComm*>& blocking, const std::vector<ncclComm*>& async, RunTurns& blockingTurns,
               std::vector<std::shared_ptr<RunTurns>>& asyncTurns) {
  auto needsTurn = [](const ncclComm* c) { return c->sharedConns != nullptr && usesChannels(c->pending); };
  asyncTurns.clear();
  for (size_t i = 0; i < async.size(); ++i) asyncTurns.push_back(std::make_shared<RunTurns>());
  // Most groups have no communicator sharing connections: nothing to take, nothing allocated.
  if (std::none_of(blocking.begin(), blocking.end(), needsTurn) && std::none_of(async.begin(), async.end(), needsTurn))
    return;
  std::vector<RunTurns::Launch> launches(1, RunTurns::Launch{&blockingTurns, {}});
  std::copy_if(blocking.begin(), blocking.end(), std::back_inserter(launches[0].comms), needsTurn);
  for (size_t i = 0; i < async.size(); ++i)
    if (needsTurn(async[i])) launches.push_back(RunTurns::Launch{asyncTurns[i].get(), {async[i]}});
  RunTurns::queueTogether(launches);
}

}  // namespace chorus
