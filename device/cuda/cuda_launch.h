// Launching the collective kernel on a stream: the CUDA executor's entry point for the
// host runtime.
#pragma once

#include <cuda_runtime.h>

#include "common/reduce_ops.h"
#include "cuda/kernel_args.h"
#include "nccl.h"

namespace chorus {

// Threads per block: a team per lane (channel). NCCL uses 512 to 640 for large work.
constexpr int kCudaThreadsPerLane = 512;

// Enqueues one kernel on `stream` that runs `nLanes` lanes (args.lanes[0..nLanes)), one
// block each, for items of `dtype` reduced with `kind`, and returns at once. Every
// pointer in `args` must be GPU-visible (kernel_args.h); `*args.status` must be zero.
// ncclInvalidArgument for a type or op without a kernel or a bad lane count,
// ncclUnhandledCudaError (with a WARN naming the CUDA error) when the launch fails.
ncclResult_t launchCollectiveKernel(ncclDataType_t dtype, RedKind kind, const KernelArgs& args, int nLanes,
                                    int threadsPerLane, cudaStream_t stream);

}  // namespace chorus
