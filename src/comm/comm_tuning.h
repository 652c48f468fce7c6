// The tuning model's view of a communicator (src/tune/tuner.h's TuneTopology), from the
// transports its ring and tree connections use.
#pragma once

#include "src/comm/comm.h"
#include "src/tune/tune_constants.h"
#include "src/tune/tuner.h"

namespace chorus {

// Once the channels are connected. All-gathers which of the ring's and tree's hops go
// through the network, so that every rank prices calls alike. `treeDepth`: the tree's,
// where it is not a binary tree over the ranks (0); `placed`: every rank is a GPU
// communicator placed in its host's topology (then, within a host, NCCL's GPU figures and
// `*constants` for them; otherwise `*constants` stays the CPU calibration).
ncclResult_t commTuneTopology(ncclComm* comm, int treeDepth, int nHosts, bool placed, TuneTopology* topo,
                              TuneConstants* constants);

}  // namespace chorus
