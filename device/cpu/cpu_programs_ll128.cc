// Placeholder until the LL128 primitives land: the planner does not choose LL128 yet.
#include "cpu/cpu_programs.h"

namespace chorus {

void runLL128Item(CpuExec&, ExecContext& ctx, const CommView& comm, const WorkItem&) {
  WARN("Rank %d: the LL128 protocol is not built yet", comm.rank);
  ctx.setError(ncclInternalError);
}

}  // namespace chorus
