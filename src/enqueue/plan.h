// Planning: turns a communicator's pending calls into executor lanes.
#pragma once

#include <vector>

#include "comm/comm.h"
#include "cpu/cpu_executor.h"

namespace chorus {

// Appends the lanes for `ops` on `comm`: one lane per channel for collectives (in
// call order), one per peer and direction for sends and receives. Sends to self are
// paired with receives from self, in order, as local copies. Returns an error (with a
// WARN) when the ops cannot be planned (unmatched self send/receive, bad op).
ncclResult_t buildLanes(ncclComm* comm, const std::vector<CollOp>& ops, std::vector<Lane>* lanes);

// The executor form of a user's op for this call (avg becomes PreMulSum(1/n) for
// floating types and SumPostDiv(n) for integers, as in NCCL).
ncclResult_t resolveRedOp(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t dtype, RedOpArgs* out);

// The tuning model's names for a call.
CollKind collKindOf(WorkKind kind);
size_t tunedBytes(const ncclComm* comm, const CollOp& op);

}  // namespace chorus
