// One lane's work items run in order by a team: the body of the CUDA kernel (one block
// per lane) and of the host-side checks of the kernel's inputs (tests/unit's teams of
// threads). Type T and op type Op are the caller's: RedOp<T, RedKind::Sum> or
// DynamicRedOp<T>; the protocol, algorithm and collective are chosen per item.
#pragma once

#include "device/common/dynamic_red_op.h"
#include "device/common/ll128_primitives.h"
#include "device/common/ll_primitives.h"
#include "device/common/programs.h"
#include "device/common/simple_primitives.h"

namespace chorus {
namespace programs {

template <typename T>
CHORUS_HD RedOp<T, RedKind::Sum> opOf(const RedOpArgs& a, RedOp<T, RedKind::Sum>*) {
  return {scalarOf<T>(a), a.divisor};
}
template <typename T>
CHORUS_HD DynamicRedOp<T> opOf(const RedOpArgs& a, DynamicRedOp<T>*) {
  return {a.kind, scalarOf<T>(a), a.divisor};
}

// Every thread reads the item from exec.teamItem: the lane's items are in memory the GPU
// reads over PCIe (mapped host memory), one read per field and thread otherwise; the
// copy is the team's, refilled after the barrier that starts each item.
// Stops at the first item after a failure (of this team or, as exec.failed() sees it,
// of another lane), every thread of the team at the same item.
template <typename T, typename Op, typename Exec>
CHORUS_HD void runLaneAsTeam(Exec& exec, const CommView& comm, const WorkItem* items, int nItems) {
  for (int i = 0; i < nItems; ++i) {
    if (!exec.teamAll(!exec.failed())) return;
    const WorkItem& w = exec.teamItem(items[i]);
    const Op op = opOf<T>(w.op, static_cast<Op*>(nullptr));
    switch (w.proto) {
      case Protocol::Simple:
        runItem<SimplePrimitives, T>(exec, comm, w, op);
        break;
      case Protocol::LL:
        runItem<LLPrimitives, T>(exec, comm, w, op);
        break;
      case Protocol::LL128:
        runItem<LL128Primitives, T>(exec, comm, w, op);
        break;
    }
  }
}

}  // namespace programs
}  // namespace chorus
