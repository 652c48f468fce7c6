// The compiled collective kernels, looked up by data type: two per type, one for Sum and
// one for every other op (collective_kernel.cuh). The table is split by type family
// over several translation units so that a parallel build compiles them side by side.
#pragma once

#include "nccl.h"

namespace chorus {

// The kernel (a __global__ function's address, for cudaLaunchKernel) for `dtype`, the
// Sum one if `sum`; nullptr when that family does not hold `dtype`. Signed integer sums
// use the unsigned kernel of the same width: wrapping addition gives the same bits.
const void* integerKernel(ncclDataType_t dtype, bool sum);
const void* floatKernel(ncclDataType_t dtype, bool sum);  // float, double
const void* halfKernel(ncclDataType_t dtype, bool sum);   // half, bfloat16
const void* fp8Kernel(ncclDataType_t dtype, bool sum);    // e4m3, e5m2

}  // namespace chorus
