#include "device/common/ll128_primitives.h"
#include "device/cpu/cpu_programs.h"

namespace chorus {

void runLL128Item(CpuExec& exec, ExecContext& ctx, const CommView& comm, const WorkItem& w) {
  programs::dispatchItem<LL128Primitives>(exec, ctx, comm, w);
}

}  // namespace chorus
