// gpu_executor.h for builds without nvcc: the CUDA executor is absent and says so.
#include "core/debug.h"
#include "src/gpu/gpu_backend.h"

namespace chorus {

bool backendAvailable(std::string* why) {
  if (why)
    *why = "this build has no CUDA executor (it was built without nvcc: CHORUS_BUILD_CUDA=OFF or no CUDA compiler)";
  return false;
}

int currentCudaDevice() { return 0; }

ncclResult_t backendEnqueue(ncclComm*, const std::vector<Lane*>&, ncclDataType_t, RedKind,
                            const std::vector<cudaStream_t>&) {
  WARN("CUDA executor: this build has none");
  return ncclInvalidUsage;
}

ncclResult_t backendFlush(ncclComm*, bool) { return ncclSuccess; }
uint64_t gpuBusIdOf(int) { return 0; }

ncclResult_t gpuAsyncError(ncclComm*) { return ncclSuccess; }
void gpuAbort(ncclComm*) {}
bool gpuMemAlloc(void**, size_t, ncclResult_t*) { return false; }
bool gpuMemFree(void*, ncclResult_t*) { return false; }

}  // namespace chorus
