// The CPU executor's program for one work item, for one protocol's primitives.
// Each protocol is instantiated (for every type and op) in its own translation unit,
// cpu_programs_<protocol>.cc, to keep compile times parallel and short.
#pragma once

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "device/common/programs.h"
#include "device/common/work.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {

// Runs `w` with the primitives class template `Prims` (SimplePrimitives, LLPrimitives, ...).
void runSimpleItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);
void runLLItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);
void runLL128Item(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w);

namespace programs {

// Type and op dispatch, then runItem with the protocol's primitives.
template <template <class, class, class> class Prims>
void dispatchItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  bool dispatched = dispatchType(w.dtype, [&](auto typeTag) {
    using T = decltype(typeTag);
    bool known = dispatchRedKind<T>(w.op.kind, scalarOf<T>(w.op), w.op.divisor,
                                    [&](const auto& op) { runItem<Prims, T>(exec, comm, w, op); });
    if (!known) {
      WARN("Rank %d: reduction kind %d is not available for %s", comm.rank, static_cast<int>(w.op.kind),
           typeName(w.dtype));
      ctx.setError(ncclInternalError);
    }
  });
  if (!dispatched) {
    WARN("Rank %d: data type %d has no executor program", comm.rank, static_cast<int>(w.dtype));
    ctx.setError(ncclInternalError);
  }
}

}  // namespace programs
}  // namespace chorus
