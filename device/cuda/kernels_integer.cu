// The integer types' kernels (kernel_table.h).
#include <cstdint>

#include "device/cuda/collective_kernel.cuh"
#include "device/cuda/kernel_table.h"

namespace chorus {

const void* integerKernel(ncclDataType_t dtype, bool sum) {
  switch (dtype) {
    case ncclInt8:
      return sum ? kernelOf<uint8_t>(true) : kernelOf<int8_t>(false);
    case ncclUint8:
      return kernelOf<uint8_t>(sum);
    case ncclInt32:
      return sum ? kernelOf<uint32_t>(true) : kernelOf<int32_t>(false);
    case ncclUint32:
      return kernelOf<uint32_t>(sum);
    case ncclInt64:
      return sum ? kernelOf<uint64_t>(true) : kernelOf<int64_t>(false);
    case ncclUint64:
      return kernelOf<uint64_t>(sum);
    default:
      return nullptr;
  }
}

}  // namespace chorus
