// cuda_backend.h for builds without nvcc: the CUDA executor is absent and says so.
#include "core/debug.h"
#include "src/executor/cuda/cuda_backend.h"

namespace chorus {

bool backendAvailable(std::string* why) {
  if (why)
    *why = "this build has no CUDA executor (it was built without nvcc: CHORUS_BUILD_CUDA=OFF or no CUDA compiler)";
  return false;
}

const GpuFifoMemory* backendFifoMemory() { return nullptr; }

int backendResidentLanes(int) { return 0; }
int backendComputeCapability(int) { return 0; }

int currentCudaDevice() { return 0; }

ncclResult_t createGpuComm(const ncclComm&, bool, std::unique_ptr<GpuComm>*) {
  WARN("CUDA executor: this build has none");
  return ncclInvalidUsage;
}

uint64_t gpuBusIdOf(int) { return 0; }
int gpuOrdinalOf(uint64_t) { return -1; }

}  // namespace chorus
