// The topology settings a communicator honours at init: NCCL_TOPO_FILE (load the
// topology instead of detecting it), NCCL_TOPO_DUMP_FILE (write it, from rank
// NCCL_TOPO_DUMP_FILE_RANK, default 0) and NCCL_GRAPH_DUMP_FILE (write the rings and
// trees chosen, from rank NCCL_GRAPH_DUMP_FILE_RANK, default 0). The CPU executor does
// not route by topology, so with none of them set init neither detects nor searches.
#pragma once

#include "nccl.h"

namespace chorus::topo {

// `hosts`: how many hosts the communicator spans (the rings and trees searched span as many).
ncclResult_t applyTopologySettings(int rank, int hosts);

}  // namespace chorus::topo
