// The float and double kernels (kernel_table.h).
#include "device/cuda/collective_kernel.cuh"
#include "device/cuda/kernel_table.h"

namespace chorus {

const void* floatKernel(ncclDataType_t dtype, bool sum) {
  switch (dtype) {
    case ncclFloat32:
      return kernelOf<float>(sum);
    case ncclFloat64:
      return kernelOf<double>(sum);
    default:
      return nullptr;
  }
}

}  // namespace chorus
