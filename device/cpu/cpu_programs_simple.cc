#include "device/common/simple_primitives.h"
#include "device/cpu/cpu_programs.h"

namespace chorus {

void runSimpleItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  programs::dispatchItem<SimplePrimitives>(exec, ctx, comm, w);
}

}  // namespace chorus
