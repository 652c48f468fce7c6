// The 8-bit floating types' kernels (kernel_table.h).
#include "device/cuda/collective_kernel.cuh"
#include "device/cuda/kernel_table.h"

namespace chorus {

const void* fp8Kernel(ncclDataType_t dtype, bool sum) {
  switch (dtype) {
    case ncclFloat8e4m3:
      return kernelOf<Fp8E4M3>(sum);
    case ncclFloat8e5m2:
      return kernelOf<Fp8E5M2>(sum);
    default:
      return nullptr;
  }
}

}  // namespace chorus
