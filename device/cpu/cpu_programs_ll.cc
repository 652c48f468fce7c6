// Placeholder until the LL primitives land: the planner does not choose LL yet.
#include "cpu/cpu_programs.h"

namespace chorus {

void runLLItem(CpuExec&, ExecContext& ctx, const CommView& comm, const WorkItem&) {
  WARN("Rank %d: the LL protocol is not built yet", comm.rank);
  ctx.setError(ncclInternalError);
}

}  // namespace chorus
