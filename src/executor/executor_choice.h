// Which executor runs a communicator's calls: the CUDA executor on a GPU communicator, the
// CPU executor on a CPU communicator. Decided when the communicator is made, as NCCL
// binds a communicator to the current device at ncclCommInitRank: a rank with a usable
// CUDA device makes a GPU communicator, unless a CPU communicator was asked for
// (CHORUS_EXECUTOR=cpu, or chorusCommInitRankExecutor in chorus.h). The choice stays: FIFO
// step counters live with the executor that advances them. The only place that knows
// every executor.
#pragma once

#include <cstdint>

#include "src/comm/comm.h"
#include "src/executor/executor.h"

namespace chorus {

// What a communicator runs on (ncclComm::executorChoice). Auto only as a request.
enum class ExecutorChoice : uint8_t { Auto = 0, Cpu, Cuda };

// Decides the executor of a communicator being made for CUDA device `comm->cudaDev`
// (executorChoice, and executorAskedBy for the WARNs): what `asked` names (from the API;
// Auto: CHORUS_EXECUTOR's auto, cpu or gpu), where Auto is Cuda where the CUDA executor
// can run, else Cpu. An unknown CHORUS_EXECUTOR value is ncclInvalidArgument, a GPU asked
// for where none can be used ncclInvalidUsage, each with a WARN. Runs on the calling
// thread before the set-up, so calls queued with the init in a group already know it.
ncclResult_t decideExecutor(ncclComm* comm, ExecutorChoice asked, const char* func);

// Checks one buffer of a call against `comm`'s executor. ncclInvalidArgument with a WARN
// (function, argument, pointer, and why) for device memory on a CPU communicator, pageable
// host memory on a GPU communicator, memory of another GPU than the communicator's. Runs
// on the calling thread.
ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func);

// The executor that runs `comm`'s work, created on first use and published in
// comm->chosenExecutor. Runs on the thread that runs the communicator's work.
Executor& executorFor(ncclComm* comm);

}  // namespace chorus
