// A GPU communicator's calls as kernel launches: the kernels are per data type and
// per "Sum or another op" (device/cuda/kernel_table.h), so a group's calls are split
// into runs that one kernel serves, launched in an order every rank agrees on.
#pragma once

#include <vector>

#include "src/enqueue/op.h"

struct ncclComm;

namespace chorus {

// One kernel's share of a group: its calls (in call order), type and op class.
struct KernelRun {
  ncclDataType_t dtype = ncclUint8;
  RedKind kind = RedKind::Sum;  // the first call's; the kernel is Sum's or the run-time op's
  std::vector<CollOp> ops;
};

// Splits `ops` into runs. Calls that only move bytes (AllGather, Broadcast, Send, Recv)
// are planned as bytes (ncclUint8), so they join any byte run; consecutive collectives
// of one type and op class share a run; sends and receives all go in the last run, so
// that they run concurrently whatever order each rank called them in (collectives come
// in the same order on every rank; point-to-point calls need not).
ncclResult_t splitIntoKernelRuns(const ncclComm* comm, const std::vector<CollOp>& ops, std::vector<KernelRun>* runs);

}  // namespace chorus
