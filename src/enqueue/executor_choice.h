// Which executor runs a communicator's calls: the CPU executor for host buffers, the
// CUDA executor for GPU buffers. The first call's buffers decide, and the choice stays:
// FIFO step counters live with the executor that advances them, so one communicator
// cannot move between the two.
#pragma once

#include "src/comm/comm.h"

namespace chorus {

// Checks one buffer of a call against `comm`'s executor, deciding it on the first call.
// ncclInvalidArgument with a WARN (function, argument, pointer, and why) for device
// memory on a CPU communicator or where the CUDA executor cannot run, pageable host
// memory on a GPU communicator, memory of another GPU than the communicator's; and
// ncclInvalidUsage for a GPU communicator sharing its GPU with another rank of the host
// unless CHORUS_ALLOW_SHARED_GPU=1.
ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func);

// A rank of the same host on the same GPU as `comm`'s rank (by PCI location where known,
// else by device number), or -1.
int sharedGpuPeer(const ncclComm& comm);

}  // namespace chorus
