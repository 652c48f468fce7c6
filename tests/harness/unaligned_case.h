// Collectives and send/recv on buffers at odd addresses: each rank's send and
// receive pointers sit at different byte offsets (1..7), so no two sides of a
// copy share an alignment; uint8 sums of small values, checked exactly, with
// guard bytes around each receive buffer.
#pragma once

#include <cstddef>

#include "harness/rank_launcher.h"

namespace chorus_test {

// AllReduce, ReduceScatter, AllGather, Broadcast, Reduce and a ring send/recv (or only
// AllReduce) at counts 1, 7, 13, 61 and around 1, 3 and 8 times `slotBytes`.
RankOutcome runUnalignedCalls(const RankContext& context, size_t slotBytes, bool onlyAllReduce);

}  // namespace chorus_test
