// Which executor runs a communicator's calls: the CPU executor for host buffers, the
// CUDA executor for GPU buffers. The first call's buffers decide, and the choice stays:
// FIFO step counters live with the executor that advances them, so one communicator
// cannot move between the two. The only place that knows every executor.
#pragma once

#include <cstdint>

#include "src/comm/comm.h"
#include "src/executor/executor.h"

namespace chorus {

// What the buffers chose so far (ncclComm::executorChoice).
enum class ExecutorChoice : uint8_t { Undecided = 0, Cpu, Cuda };

// Checks one buffer of a call against `comm`'s executor, deciding it on the first call.
// ncclInvalidArgument with a WARN (function, argument, pointer, and why) for device
// memory on a CPU communicator or where the CUDA executor cannot run, pageable host
// memory on a GPU communicator, memory of another GPU than the communicator's; and
// ncclInvalidUsage for a GPU communicator sharing its GPU with another rank of the host
// unless CHORUS_ALLOW_SHARED_GPU=1. Runs on the calling thread.
ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func);

// The executor that runs `comm`'s work now, created on first use: the one its buffers
// chose (published in comm->chosenExecutor), or the CPU executor while none is chosen
// (calls without buffers). Runs on the thread that runs the communicator's work.
Executor& executorFor(ncclComm* comm);

}  // namespace chorus
