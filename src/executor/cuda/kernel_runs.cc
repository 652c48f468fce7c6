#include "src/executor/cuda/kernel_runs.h"

#include <algorithm>

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "src/enqueue/plan.h"

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

}  // namespace chorus
