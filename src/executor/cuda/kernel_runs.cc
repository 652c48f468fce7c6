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

// A lane's round in the point-to-point schedule (splitLanesIntoKernels), or -1 for a
// channel's lane. A lane holds one kind of work: a channel's collectives, or the sends to
// one peer, or the receives from one peer, or the local copies.
int roundOf(const Lane& lane, int rank, int nranks) {
  const WorkItem& w = lane.items.front();
  switch (w.kind) {
    case WorkKind::Send:
      return (w.root - rank + nranks) % nranks;
    case WorkKind::Recv:
      return (rank - w.root + nranks) % nranks;
    case WorkKind::LocalCopy:
      return 0;
    default:
      return -1;
  }
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
      CHORUS_CHECK(resolveRedOp(comm, op, &red));
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

void splitLanesIntoKernels(int rank, int nranks, int maxLanes, const std::vector<Lane*>& lanes,
                           std::vector<std::vector<Lane*>>* kernels) {
  kernels->clear();
  const size_t bound = maxLanes > 0 ? static_cast<size_t>(maxLanes) : lanes.size();
  if (lanes.size() <= bound) {
    kernels->push_back(lanes);
    return;
  }
  std::vector<Lane*> current;
  std::vector<std::pair<int, Lane*>> byRound;
  for (Lane* lane : lanes) {
    const int round = roundOf(*lane, rank, nranks);
    if (round < 0) {
      current.push_back(lane);
    } else {
      byRound.emplace_back(round, lane);
    }
  }
  std::stable_sort(byRound.begin(), byRound.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t begin = 0; begin < byRound.size();) {
    size_t end = begin;
    while (end < byRound.size() && byRound[end].first == byRound[begin].first) ++end;
    if (!current.empty() && current.size() + (end - begin) > bound) {
      kernels->push_back(std::move(current));
      current = {};
    }
    for (size_t i = begin; i < end; ++i) current.push_back(byRound[i].second);
    begin = end;
  }
  if (!current.empty()) kernels->push_back(std::move(current));
}

}  // namespace chorus
