#include <algorithm>
#include <mutex>
#include <set>
#include <type_traits>

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "device/cuda/cuda_launch.h"
#include "device/cuda/kernel_table.h"

namespace chorus {
namespace {

const void* kernelFor(ncclDataType_t dtype, RedKind kind) {
  const bool sum = kind == RedKind::Sum;
  for (auto family : {integerKernel, floatKernel, halfKernel, fp8Kernel}) {
    if (const void* k = family(dtype, sum)) return k;
  }
  return nullptr;
}

}  // namespace

ncclResult_t warnCudaFailure(const char* call, cudaError_t err, int rank) {
  if (rank >= 0) {
    WARN("CUDA executor: rank %d: %s failed: %s (%s)", rank, call, cudaGetErrorName(err), cudaGetErrorString(err));
  } else {
    WARN("CUDA executor: %s failed: %s (%s)", call, cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return ncclUnhandledCudaError;
}

ncclResult_t prepareCollectiveKernels() {
  static std::mutex mutex;
  static std::set<int> prepared;  // devices
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return warnCudaFailure("cudaGetDevice", err);
  std::lock_guard<std::mutex> lock(mutex);
  if (prepared.count(device)) return ncclSuccess;
  size_t stack = 0;
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (RedKind kind : {RedKind::Sum, RedKind::Max}) {
      const void* kernel = kernelFor(static_cast<ncclDataType_t>(t), kind);
      if (kernel == nullptr) continue;
      cudaFuncAttributes attrs{};
      err = cudaFuncGetAttributes(&attrs, kernel);  // loads it (CUDA loads kernels lazily)
      if (err != cudaSuccess) return warnCudaFailure("cudaFuncGetAttributes", err);
      if (attrs.maxThreadsPerBlock < kCudaThreadsPerLane) {
        WARN("CUDA executor: the kernel for data type %d can run %d threads per block, fewer than %d (%d registers)", t,
             attrs.maxThreadsPerBlock, kCudaThreadsPerLane, attrs.numRegs);
        return ncclInternalError;
      }
      stack = std::max(stack, attrs.localSizeBytes);
    }
  }
  size_t limit = 0;
  err = cudaDeviceGetLimit(&limit, cudaLimitStackSize);
  if (err != cudaSuccess) return warnCudaFailure("cudaDeviceGetLimit", err);
  if (stack > limit) {
    err = cudaDeviceSetLimit(cudaLimitStackSize, stack);
    if (err != cudaSuccess) return warnCudaFailure("cudaDeviceSetLimit(cudaLimitStackSize)", err);
  }
  prepared.insert(device);
  return ncclSuccess;
}

ncclResult_t residentCollectiveBlocks(int* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return warnCudaFailure("cudaGetDevice", err);
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return warnCudaFailure("cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)", err);
  int perSm = 0;
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (RedKind kind : {RedKind::Sum, RedKind::Max}) {
      const void* kernel = kernelFor(static_cast<ncclDataType_t>(t), kind);
      if (kernel == nullptr) continue;
      int n = 0;
      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kCudaThreadsPerLane, 0);
      if (err != cudaSuccess) return warnCudaFailure("cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
      perSm = perSm == 0 ? n : std::min(perSm, n);
    }
  }
  *blocks = perSm * sms;
  return ncclSuccess;
}

ncclResult_t launchCollectiveKernel(ncclDataType_t dtype, RedKind kind, const KernelArgs& args, int nLanes,
                                    int threadsPerLane, cudaStream_t stream) {
  const void* kernel = kernelFor(dtype, kind);
  if (kernel == nullptr) {
    WARN("CUDA executor: no kernel for data type %d", static_cast<int>(dtype));
    return ncclInvalidArgument;
  }
  bool integer = false;
  dispatchType(dtype, [&](auto tag) { integer = std::is_integral_v<decltype(tag)>; });
  if (kind == RedKind::SumPostDiv && !integer) {
    WARN("CUDA executor: SumPostDiv is for integer types, not %s", typeName(dtype));
    return ncclInvalidArgument;
  }
  if (nLanes <= 0 || threadsPerLane <= 0 || threadsPerLane > 1024 || threadsPerLane % 32 != 0) {
    WARN("CUDA executor: invalid launch of %d lanes of %d threads", nLanes, threadsPerLane);
    return ncclInvalidArgument;
  }
  KernelArgs copy = args;  // cudaLaunchKernel takes the address of each argument
  void* params[] = {&copy};
  const cudaError_t err = cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(nLanes)),
                                           dim3(static_cast<unsigned>(threadsPerLane)), params, 0, stream);
  if (err != cudaSuccess) {
    WARN("CUDA executor: cudaLaunchKernel of %d lanes failed: %s (%s)", nLanes, cudaGetErrorName(err),
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

}  // namespace chorus
