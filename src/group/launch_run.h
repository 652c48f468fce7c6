// How a group's end runs the collective and send/receive calls it collected on blocking
// communicators (a non-blocking one's worker runs its launch the same way): each launch
// waits for its turns among communicators sharing connections (shared_connections.h),
// connects the Send/Recv peers it needs, then stages every communicator's calls with its
// executor and starts them together (executor.h). Communicators of one family run in
// rounds, one member per round, in tag order.
#pragma once

#include <memory>
#include <vector>

#include "src/comm/comm.h"
#include "src/comm/shared_connections.h"
#include "src/executor/executor.h"

namespace chorus {

// Runs the calls of blocking communicators (each one's `running`) from this thread.
// `launch`: the thread's scratch, reused so that a warm call allocates nothing. `turns`:
// what the launch took among communicators sharing connections when it was handed over,
// awaited before it runs and ended when it has. Returns the first failure; a communicator
// whose work failed is failed for good, and a call queued behind a set-up that failed
// fails with the set-up's error while the others run.
ncclResult_t runBlocking(const std::vector<ncclComm*>& all, GroupLaunch& launch, RunTurns& turns);

// The turns of a group's launches among communicators sharing connections, every launch's
// taken together when the group ends (in the order the calls were made, not when a worker
// gets to them): the blocking communicators' into `blockingTurns`, each non-blocking
// one's into its own (`asyncTurns`, one per entry of `async`). Send/Recv take no turn.
void takeTurns(const std::vector<ncclComm*>& blocking, const std::vector<ncclComm*>& async, RunTurns& blockingTurns,
               std::vector<std::shared_ptr<RunTurns>>& asyncTurns);

}  // namespace chorus
