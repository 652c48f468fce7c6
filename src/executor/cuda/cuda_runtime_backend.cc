// cuda_backend.h for builds with the CUDA executor: the kernels are in this library
// (device/cuda, with the CUDA runtime linked statically, which loads the driver only
// when first used), and run when a driver and a GPU are there.
#include <cuda_runtime.h>

#include <mutex>

#include "core/debug.h"
#include "device/cuda/cuda_launch.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_backend.h"
#include "src/executor/cuda/cuda_comm.h"
#include "src/executor/cuda/cuda_scopes.h"

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

int backendResidentLanes(int device) {
  if (!backendAvailable(nullptr)) return 0;
  DeviceScope scope(device);
  RelaxedCapture relaxed;  // loading the kernels may come during a capture (a communicator made inside one)
  int blocks = 0;
  if (prepareCollectiveKernels() != ncclSuccess || residentCollectiveBlocks(&blocks) != ncclSuccess) return 0;
  return blocks;
}

int backendComputeCapability(int device) {
  if (!backendAvailable(nullptr)) return 0;
  int major = 0;
  int minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
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

ncclResult_t createGpuComm(const ncclComm& comm, bool sharedGpu, std::unique_ptr<GpuComm>* out) {
  CudaComm* created = nullptr;
  CHORUS_CHECK(CudaComm::create(comm, sharedGpu, &created));
  out->reset(created);
  return ncclSuccess;
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

int gpuOrdinalOf(uint64_t busId) {
  int count = 0;
  if (busId == 0 || !backendAvailable(nullptr) || cudaGetDeviceCount(&count) != cudaSuccess) return -1;
  for (int device = 0; device < count; ++device)
    if (gpuBusIdOf(device) == busId) return device;
  return -1;
}

}  // namespace chorus
