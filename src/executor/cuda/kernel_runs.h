// A GPU communicator's calls as kernel launches: the kernels are per data type and
// per "Sum or another op" (device/cuda/kernel_table.h), so a group's calls are split
// into runs that one kernel serves, launched in an order every rank agrees on.
#pragma once

#include <vector>

#include "device/common/work.h"
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

// Splits the lanes of one run (buildLanes') into kernels of at most `maxLanes` lanes, one
// block each, for rank `rank` of `nranks`; `maxLanes` 0: no bound, one kernel. A lane that
// waits for a peer's lane that is not resident never finishes, so a kernel must not have
// more blocks than the GPU runs at once. The channels' lanes (collectives) go in the first
// kernel; sends and receives go by round: in round d a rank sends to rank + d and receives
// from rank - d (to and from itself: round 0), so that its partners have the matching
// lanes in the same round. Rounds are kept whole and in order: however each rank cuts
// them, the lowest unfinished round is resident on every rank, so every kernel finishes
// (NCCL's point-to-point schedule pairs peers the same way). A round that alone exceeds
// `maxLanes` gets a kernel of its own.
void splitLanesIntoKernels(int rank, int nranks, int maxLanes, const std::vector<Lane*>& lanes,
                           std::vector<std::vector<Lane*>>* kernels);

}  // namespace chorus
