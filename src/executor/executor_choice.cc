#include "src/executor/executor_choice.h"

#include <strings.h>

#include <string>

#include "core/cuda_driver_api.h"
#include "core/debug.h"
#include "core/env.h"
#include "src/executor/cpu/cpu_executor.h"
#include "src/executor/cuda/cuda_executor.h"

namespace chorus {
namespace {

std::string gpuName(int ordinal) { return ordinal >= 0 ? "GPU " + std::to_string(ordinal) : std::string("a GPU"); }

ExecutorChoice choiceOf(const ncclComm* comm) { return comm->executorChoice.load(std::memory_order_acquire); }

// What was asked for, and by whom: the API's own request, else CHORUS_EXECUTOR.
ncclResult_t requestedExecutor(ExecutorChoice asked, const char* func, ExecutorChoice* request, const char** askedBy) {
  *request = asked;
  *askedBy = func;
  if (asked != ExecutorChoice::Auto) return ncclSuccess;
  const std::string value = envString("CHORUS_EXECUTOR", "auto");
  if (strcasecmp(value.c_str(), "auto") == 0) return ncclSuccess;
  if (strcasecmp(value.c_str(), "cpu") == 0) {
    *request = ExecutorChoice::Cpu;
    *askedBy = "CHORUS_EXECUTOR=cpu";
    return ncclSuccess;
  }
  if (strcasecmp(value.c_str(), "gpu") == 0) {
    *request = ExecutorChoice::Cuda;
    *askedBy = "CHORUS_EXECUTOR=gpu";
    return ncclSuccess;
  }
  WARN("%s: invalid argument: CHORUS_EXECUTOR=%s is not one of auto, cpu, gpu", func, value.c_str());
  return ncclInvalidArgument;
}

}  // namespace

ncclResult_t decideExecutor(ncclComm* comm, ExecutorChoice asked, const char* func) {
  ExecutorChoice request = ExecutorChoice::Auto;
  CHORUS_CHECK(requestedExecutor(asked, func, &request, &comm->executorAskedBy));
  std::string why;
  const bool gpu = request != ExecutorChoice::Cpu && gpuExecutorAvailable(&why);
  if (request == ExecutorChoice::Cuda && !gpu) {
    WARN("%s: invalid usage: %s asks for a GPU communicator (rank %d), but the CUDA executor cannot run here (%s)",
         func, comm->executorAskedBy, comm->rank, why.c_str());
    return ncclInvalidUsage;
  }
  comm->executorChoice.store(gpu ? ExecutorChoice::Cuda : ExecutorChoice::Cpu, std::memory_order_release);
  return ncclSuccess;
}

ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func) {
  const PointerKind kind = classifyPointer(ptr);
  const bool gpuComm = choiceOf(comm) == ExecutorChoice::Cuda;
  if (kind.device) {
    if (gpuComm) {
      if (kind.ordinal < 0 || kind.ordinal == comm->cudaDev) return ncclSuccess;
      WARN("%s: invalid argument: %s %p is memory of GPU %d, but communicator %p (rank %d) uses GPU %d", func, arg, ptr,
           kind.ordinal, static_cast<void*>(comm), comm->rank, comm->cudaDev);
      return ncclInvalidArgument;
    }
    std::string why;
    if (!gpuExecutorAvailable(&why)) {
      WARN(
          "%s: invalid argument: %s %p is device memory of %s, and the CUDA executor cannot run here (%s); "
          "collectives run on the CPU executor, so buffers must be host memory (pageable, pinned or managed)",
          func, arg, ptr, gpuName(kind.ordinal).c_str(), why.c_str());
    } else {
      WARN(
          "%s: invalid argument: %s %p is device memory of %s, but communicator %p (rank %d) is a CPU "
          "communicator (%s asked for it), which takes host memory only",
          func, arg, ptr, gpuName(kind.ordinal).c_str(), static_cast<void*>(comm), comm->rank, comm->executorAskedBy);
    }
    return ncclInvalidArgument;
  }
  if (gpuComm && !kind.gpuReachable) {
    WARN(
        "%s: invalid argument: %s %p is pageable host memory, which the GPU of communicator %p (rank %d) cannot "
        "reach; use device memory (cudaMalloc, ncclMemAlloc), pinned memory (cudaHostAlloc, cudaHostRegister) or "
        "managed memory, or make a CPU communicator (CHORUS_EXECUTOR=cpu, chorusCommInitRankExecutor)",
        func, arg, ptr, static_cast<void*>(comm), comm->rank);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

Executor& executorFor(ncclComm* comm) {
  if (!comm->executor) {
    if (choiceOf(comm) == ExecutorChoice::Cuda) {
      comm->executor = makeCudaExecutor();
    } else {
      comm->executor = std::make_unique<CpuExecutor>(&comm->abortFlag, &comm->revokeFlag, comm->rank, comm->timeoutSec,
                                                     comm->localRanks);
    }
    comm->chosenExecutor.store(comm->executor.get(), std::memory_order_release);
  }
  return *comm->executor;
}

}  // namespace chorus
