// The 16-bit floating types' kernels (kernel_table.h).
#include "device/cuda/collective_kernel.cuh"
#include "device/cuda/kernel_table.h"

namespace chorus {

const void* halfKernel(ncclDataType_t dtype, bool sum) {
  switch (dtype) {
    case ncclFloat16:
      return kernelOf<Half>(sum);
    case ncclBfloat16:
      return kernelOf<BFloat16>(sum);
    default:
      return nullptr;
  }
}

}  // namespace chorus
