#include <type_traits>

#include "common/datatypes.h"
#include "core/debug.h"
#include "cuda/cuda_launch.h"
#include "cuda/kernel_table.h"

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
