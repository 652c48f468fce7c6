#include "device/common/ll_primitives.h"
#include "device/cpu/cpu_programs.h"

namespace chorus {

void runLLItem(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  programs::dispatchItem<LLPrimitives>(exec, ctx, comm, w);
}

}  // namespace chorus
