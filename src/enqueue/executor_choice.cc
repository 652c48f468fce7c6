#include "src/enqueue/executor_choice.h"

#include <cstdio>
#include <string>

#include "core/cuda_driver_api.h"
#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

std::string gpuName(int ordinal) { return ordinal >= 0 ? "GPU " + std::to_string(ordinal) : std::string("a GPU"); }

ncclResult_t becomeGpuCommunicator(ncclComm* comm, const char* func) {
  const int other = sharedGpuPeer(*comm);
  if (other >= 0 && envInt("CHORUS_ALLOW_SHARED_GPU", 0) != 1) {
    WARN(
        "%s: invalid usage: rank %d and rank %d both use CUDA device %d on this host (NCCL refuses this: "
        "\"Duplicate GPU detected\"); set CHORUS_ALLOW_SHARED_GPU=1 to run several ranks on one GPU",
        func, comm->rank, other, comm->cudaDev);
    return ncclInvalidUsage;
  }
  comm->executor = ExecutorKind::Cuda;
  return ncclSuccess;
}

}  // namespace

int sharedGpuPeer(const ncclComm& comm) {
  const PeerInfo* self = nullptr;
  for (const PeerInfo& p : comm.peers)
    if (p.rank == comm.rank) self = &p;
  if (self == nullptr) return -1;
  for (const PeerInfo& p : comm.peers) {
    if (p.rank == comm.rank || p.hostHash != self->hostHash) continue;
    // The GPU's PCI location where both know it: device numbers differ per process with
    // CUDA_VISIBLE_DEVICES (every rank may be "device 0" on a GPU of its own).
    const bool same =
        p.gpuBusId != 0 && self->gpuBusId != 0 ? p.gpuBusId == self->gpuBusId : p.cudaDev == self->cudaDev;
    if (same) return p.rank;
  }
  return -1;
}

ncclResult_t checkBufferForExecutor(ncclComm* comm, const void* ptr, const char* arg, const char* func) {
  const PointerKind kind = classifyPointer(ptr);
  if (kind.device) {
    if (comm->executor == ExecutorKind::Cpu) {
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
    if (comm->executor == ExecutorKind::Cuda) return ncclSuccess;
    return becomeGpuCommunicator(comm, func);
  }
  if (comm->executor == ExecutorKind::Cuda && !kind.gpuReachable) {
    WARN(
        "%s: invalid argument: %s %p is pageable host memory, which the GPU of communicator %p (rank %d) cannot "
        "reach; use device memory (cudaMalloc, ncclMemAlloc), pinned memory (cudaHostAlloc, cudaHostRegister) or "
        "managed memory",
        func, arg, ptr, static_cast<void*>(comm), comm->rank);
    return ncclInvalidArgument;
  }
  if (comm->executor == ExecutorKind::Undecided) comm->executor = ExecutorKind::Cpu;
  return ncclSuccess;
}

}  // namespace chorus
