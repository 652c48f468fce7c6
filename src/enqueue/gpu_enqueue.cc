#include "src/enqueue/gpu_enqueue.h"

#include <algorithm>

#include "device/common/datatypes.h"
#include "core/debug.h"
#include "src/enqueue/plan.h"
#include "src/gpu/gpu_executor.h"

namespace chorus {
namespace {

bool movesBytesOnly(WorkKind kind) {
  return kind == WorkKind::AllGather || kind == WorkKind::Broadcast || kind == WorkKind::Send || kind == WorkKind::Recv;
}

}  // namespace

ncclResult_t splitIntoKernelRuns(const ncclComm* comm, const std::vector<CollOp>& ops, std::vector<KernelRun>* runs) {
  runs->clear();
  KernelRun p2p;
  for (const CollOp& op : ops) {
    CollOp planned = op;
    RedKind kind = RedKind::Sum;
    if (movesBytesOnly(op.kind)) {
      planned.count = op.count * typeSize(op.dtype);
      planned.dtype = ncclUint8;
      planned.op = ncclSum;
    } else {
      RedOpArgs red;
      CHORUS_CHECK(resolveRedOp(comm, op.op, op.dtype, &red));
      kind = red.kind;
    }
    if (op.kind == WorkKind::Send || op.kind == WorkKind::Recv) {
      p2p.ops.push_back(planned);
      continue;
    }
    const bool sum = kind == RedKind::Sum;
    if (runs->empty() || runs->back().dtype != planned.dtype || (runs->back().kind == RedKind::Sum) != sum)
      runs->push_back(KernelRun{planned.dtype, kind, {}});
    runs->back().ops.push_back(planned);
  }
  if (!p2p.ops.empty()) runs->push_back(std::move(p2p));
  return ncclSuccess;
}

ncclResult_t stageOnGpu(ncclComm* comm, const std::vector<CollOp>& ops) {
  std::vector<cudaStream_t> streams;
  for (const CollOp& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
  std::vector<KernelRun> runs;
  CHORUS_CHECK(splitIntoKernelRuns(comm, ops, &runs));
  std::vector<Lane*> lanes;
  for (const KernelRun& run : runs) {
    lanes.clear();
    CHORUS_CHECK(buildLanes(comm, run.ops, &lanes));
    if (lanes.empty()) continue;
    CHORUS_CHECK(gpuEnqueue(comm, lanes, run.dtype, run.kind, streams));
  }
  return ncclSuccess;
}

}  // namespace chorus
