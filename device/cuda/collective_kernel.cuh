// The collective kernel: block b runs lane b's work items in order, its threads a team,
// with device/common's programs. Templated on the data type and the op type, either
// RedOp<T, RedKind::Sum> or DynamicRedOp<T> (every other op, chosen at run time); the
// algorithm and protocol of each item are chosen at run time too (programs::runItem), so
// two kernels per type serve every collective, algorithm, protocol and op.
#pragma once

#include "common/dynamic_red_op.h"
#include "common/ll128_primitives.h"
#include "common/ll_primitives.h"
#include "common/programs.h"
#include "common/simple_primitives.h"
#include "cuda/cuda_exec.h"
#include "cuda/kernel_args.h"

namespace chorus {

template <typename T>
__device__ inline RedOp<T, RedKind::Sum> opOf(const RedOpArgs& a, RedOp<T, RedKind::Sum>*) {
  return {programs::scalarOf<T>(a), a.divisor};
}
template <typename T>
__device__ inline DynamicRedOp<T> opOf(const RedOpArgs& a, DynamicRedOp<T>*) {
  return {a.kind, programs::scalarOf<T>(a), a.divisor};
}

template <typename T, typename Op>
__global__ void collectiveKernel(KernelArgs args) {
  CudaExec exec(args);
  const KernelLane lane = args.lanes[blockIdx.x];
  for (int i = 0; i < lane.nItems; ++i) {
    if (exec.teamAll(!exec.failed()) == false) return;  // every thread stops at the same item
    const WorkItem& w = lane.items[i];
    const Op op = opOf<T>(w.op, static_cast<Op*>(nullptr));
    switch (w.proto) {
      case Protocol::Simple:
        programs::runItem<SimplePrimitives, T>(exec, args.comm, w, op);
        break;
      case Protocol::LL:
        programs::runItem<LLPrimitives, T>(exec, args.comm, w, op);
        break;
      case Protocol::LL128:
        programs::runItem<LL128Primitives, T>(exec, args.comm, w, op);
        break;
    }
  }
}

}  // namespace chorus

namespace chorus {

// The kernel of type T for Sum (`sum`) or for the other ops; taking its address is what
// instantiates it in the translation unit that asks.
template <typename T>
const void* kernelOf(bool sum) {
  return sum ? reinterpret_cast<const void*>(&collectiveKernel<T, RedOp<T, RedKind::Sum>>)
             : reinterpret_cast<const void*>(&collectiveKernel<T, DynamicRedOp<T>>);
}

}  // namespace chorus
