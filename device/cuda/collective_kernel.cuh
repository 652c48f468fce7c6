// The collective kernel: block b runs lane b's work items in order, its threads a team,
// with device/common's programs. Templated on the data type and the op type, either
// RedOp<T, RedKind::Sum> or DynamicRedOp<T> (every other op, chosen at run time); the
// algorithm and protocol of each item are chosen at run time too (programs::runItem), so
// two kernels per type serve every collective, algorithm, protocol and op.
#pragma once

#include "device/common/lane_program.h"
#include "device/cuda/cuda_exec.h"
#include "device/cuda/kernel_args.h"

namespace chorus {

// Bounded to one block of kCudaThreadsPerLane per SM at least, so ptxas keeps the
// registers within what such a launch has.
template <typename T, typename Op>
__global__ void __launch_bounds__(kCudaThreadsPerLane, 1) collectiveKernel(KernelArgs args) {
  CudaExec exec(args);
  const KernelLane lane = args.lanes[blockIdx.x];
  programs::runLaneAsTeam<T, Op>(exec, args.comm, lane.items, lane.nItems);
}

// The kernel of type T for Sum (`sum`) or for the other ops; taking its address is what
// instantiates it in the translation unit that asks.
template <typename T>
const void* kernelOf(bool sum) {
  return sum ? reinterpret_cast<const void*>(&collectiveKernel<T, RedOp<T, RedKind::Sum>>)
             : reinterpret_cast<const void*>(&collectiveKernel<T, DynamicRedOp<T>>);
}

}  // namespace chorus
