// gpu_executor.h for builds with the CUDA executor: the kernels are in this library
// (device/cuda, with the CUDA runtime linked statically, which loads the driver only
// when first used), and run when a driver and a GPU are there.
#include <cuda_runtime.h>

#include <mutex>

#include "src/comm/comm.h"
#include "core/debug.h"
#include "src/enqueue/executor_choice.h"
#include "src/gpu/cuda_comm.h"
#include "src/gpu/gpu_backend.h"

namespace chorus {

bool backendAvailable(std::string* why) {
  static std::once_flag once;
  static std::string reason;  // "" when available
  std::call_once(once, [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    } else if (count == 0) {
      reason = "no CUDA device";
    }
  });
  if (why) *why = reason;
  return reason.empty();
}

int currentCudaDevice() {
  if (!backendAvailable(nullptr)) return 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return device;
}

ncclResult_t backendEnqueue(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                            const std::vector<cudaStream_t>& streams) {
  if (!comm->gpu) {
    CudaComm* created = nullptr;
    CHORUS_CHECK(CudaComm::create(*comm, sharedGpuPeer(*comm) >= 0, &created));
    comm->gpu.reset(created);
    comm->gpuForQueries.store(created, std::memory_order_release);
  }
  return static_cast<CudaComm*>(comm->gpu.get())->stage(comm, lanes, dtype, kind, streams);
}

ncclResult_t backendFlush(ncclComm* comm, bool launch) {
  if (!comm->gpu) return ncclSuccess;
  return static_cast<CudaComm*>(comm->gpu.get())->flush(*comm, launch);
}

uint64_t gpuBusIdOf(int device) {
  if (!backendAvailable(nullptr)) return 0;
  int domain = 0, bus = 0, slot = 0;
  if (cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // domain:bus:device, plus one so that 0 stays "unknown".
  return ((static_cast<uint64_t>(domain) << 16 | static_cast<uint64_t>(bus) << 8 | static_cast<uint64_t>(slot)) + 1);
}

ncclResult_t gpuAsyncError(ncclComm* comm) {
  GpuComm* gpu = comm->gpuForQueries.load(std::memory_order_acquire);
  return gpu ? static_cast<CudaComm*>(gpu)->asyncError(*comm) : ncclSuccess;
}

void gpuAbort(ncclComm* comm) {
  // From any thread: a watchdog aborts while the owner may be inside a call.
  if (GpuComm* gpu = comm->gpuForQueries.load(std::memory_order_acquire)) static_cast<CudaComm*>(gpu)->abort();
}

bool gpuMemAlloc(void** ptr, size_t bytes, ncclResult_t* result) {
  if (!backendAvailable(nullptr)) return false;
  const cudaError_t err = cudaMalloc(ptr, bytes);
  if (err != cudaSuccess) {
    WARN("ncclMemAlloc: cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(err));
    *result = ncclUnhandledCudaError;
  } else {
    *result = ncclSuccess;
  }
  return true;
}

bool gpuMemFree(void* ptr, ncclResult_t* result) {
  if (!backendAvailable(nullptr)) return false;
  const cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) {
    WARN("ncclMemFree: cudaFree(%p) failed: %s", ptr, cudaGetErrorString(err));
    *result = ncclUnhandledCudaError;
  } else {
    *result = ncclSuccess;
  }
  return true;
}

}  // namespace chorus
