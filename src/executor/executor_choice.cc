#include "src/executor/executor_choice.h"

#include <string>

#include "core/cuda_driver_api.h"
#include "core/debug.h"
#include "src/executor/cpu/cpu_executor.h"
#include "src/executor/cuda/cuda_executor.h"

namespace chorus {
namespace {

std::string gpuName(int ordinal) { return ordinal >= 0 ? "GPU " + std::to_string(ordinal) : std::string("a GPU"); }

ExecutorChoice choiceOf(const ncclComm* comm) { return comm->executorChoice.load(std::memory_order_acquire); }

}  // namespace

ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func) {
  const PointerKind kind = classifyPointer(ptr);
  const ExecutorChoice choice = choiceOf(comm);
  if (kind.device) {
    if (choice == ExecutorChoice::Cpu) {
      WARN(
          "%s: invalid argument: %s %p is device memory of %s, but communicator %p (rank %d) runs on the CPU "
          "executor: its first call was given host memory, and a communicator keeps its executor",
          func, arg, ptr, gpuName(kind.ordinal).c_str(), static_cast<void*>(comm), comm->rank);
      return ncclInvalidArgument;
    }
    std::string why;
    if (!gpuExecutorAvailable(&why)) {
      WARN(
          "%s: invalid argument: %s %p is device memory of %s, and the CUDA executor cannot run here (%s); "
          "collectives run on the CPU executor, so buffers must be host memory (pageable, pinned or managed)",
          func, arg, ptr, gpuName(kind.ordinal).c_str(), why.c_str());
      return ncclInvalidArgument;
    }
    if (kind.ordinal >= 0 && kind.ordinal != comm->cudaDev) {
      WARN("%s: invalid argument: %s %p is memory of GPU %d, but communicator %p (rank %d) uses GPU %d", func, arg, ptr,
           kind.ordinal, static_cast<void*>(comm), comm->rank, comm->cudaDev);
      return ncclInvalidArgument;
    }
    if (choice == ExecutorChoice::Cuda) return ncclSuccess;
    CHORUS_CHECK(checkGpuNotShared(*comm, func));
    comm->executorChoice.store(ExecutorChoice::Cuda, std::memory_order_release);
    return ncclSuccess;
  }
  if (choice == ExecutorChoice::Cuda && !kind.gpuReachable) {
    WARN(
        "%s: invalid argument: %s %p is pageable host memory, which the GPU of communicator %p (rank %d) cannot "
        "reach; use device memory (cudaMalloc, ncclMemAlloc), pinned memory (cudaHostAlloc, cudaHostRegister) or "
        "managed memory",
        func, arg, ptr, static_cast<void*>(comm), comm->rank);
    return ncclInvalidArgument;
  }
  if (choice == ExecutorChoice::Undecided) comm->executorChoice.store(ExecutorChoice::Cpu, std::memory_order_release);
  return ncclSuccess;
}

Executor& executorFor(ncclComm* comm) {
  const ExecutorChoice choice = choiceOf(comm);
  const bool chosen = comm->chosenExecutor.load(std::memory_order_relaxed) != nullptr;  // only this thread sets it
  if (!chosen && choice == ExecutorChoice::Cuda) {
    // Replaces the CPU executor that ran calls without buffers, if any: it was never
    // published, so no other thread can hold it.
    comm->executor = makeCudaExecutor();
  } else if (!comm->executor) {
    comm->executor = std::make_unique<CpuExecutor>(&comm->abortFlag, &comm->revokeFlag, comm->rank, comm->timeoutSec,
                                                   comm->localRanks);
  }
  if (!chosen && choice != ExecutorChoice::Undecided)
    comm->chosenExecutor.store(comm->executor.get(), std::memory_order_release);
  return *comm->executor;
}

}  // namespace chorus
