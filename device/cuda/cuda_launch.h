// Launching the collective kernel on a stream: the CUDA executor's entry point for the
// host runtime.
#pragma once

#include <cuda_runtime.h>

#include "device/common/reduce_ops.h"
#include "device/cuda/kernel_args.h"
#include "nccl.h"

namespace chorus {

// A failed CUDA call, as every CUDA executor error reports it: a WARN naming the call, the
// rank (when >= 0) and the CUDA error; returns ncclUnhandledCudaError.
ncclResult_t warnCudaFailure(const char* call, cudaError_t err, int rank = -1);

// Loads every collective kernel on the current device and raises the device's stack limit
// to what they need, once per device per process, so that no later launch loads a kernel
// or grows the stack (both may wait for the kernels already running, which may be waiting
// for that very launch: ranks sharing a GPU). ncclUnhandledCudaError with a WARN, and
// ncclInternalError when a kernel cannot run kCudaThreadsPerLane threads.
ncclResult_t prepareCollectiveKernels();

// How many blocks of kCudaThreadsPerLane threads the current device runs at once for every
// collective kernel: the fewest blocks per SM of any of them (cudaOccupancy*), times the
// SMs. A launch of more lanes leaves some waiting for an SM, and a lane that waits for a
// peer's lane that is not resident never finishes. ncclUnhandledCudaError with a WARN.
ncclResult_t residentCollectiveBlocks(int* blocks);

// Enqueues one kernel on `stream` that runs `nLanes` lanes (args.lanes[0..nLanes)), one
// block each, for items of `dtype` reduced with `kind`, and returns at once. Every
// pointer in `args` must be GPU-visible (kernel_args.h); `*args.status` must be zero.
// ncclInvalidArgument for a type or op without a kernel or a bad lane count,
// ncclUnhandledCudaError (with a WARN naming the CUDA error) when the launch fails.
ncclResult_t launchCollectiveKernel(ncclDataType_t dtype, RedKind kind, const KernelArgs& args, int nLanes,
                                    int threadsPerLane, cudaStream_t stream);

}  // namespace chorus
