// Planning: turns a communicator's pending calls into executor lanes.
#pragma once

#include <map>
#include <vector>

#include "src/comm/comm.h"

namespace chorus {

// A communicator's lanes, kept between calls so that planning a call allocates nothing
// once the communicator is warm (a small call's planning would otherwise cost as much as
// its data movement). Only the items change from call to call.
struct PlanLanes {
  std::vector<Lane> channels;                       // by channel
  std::map<int, Lane> sends;                        // by peer
  std::map<int, Lane> recvs;                        // by peer
  Lane selfCopy{};                                  // sends to self paired with receives from self
  std::vector<const CollOp*> selfSends, selfRecvs;  // matched in order
};

// Plans `ops` on `comm` into its PlanLanes and appends the lanes with work: one lane per
// channel for collectives (in call order), one per peer and direction for sends and
// receives. Sends to self are paired with receives from self, in order, as local copies.
// The lanes stay valid until the communicator's next plan. Where an op asks
// (op.profile.placement), what was chosen for it is written there. Returns an error (with
// a WARN) when the ops cannot be planned (unmatched self send/receive, bad op).
ncclResult_t buildLanes(ncclComm* comm, const std::vector<CollOp>& ops, std::vector<Lane*>* lanes);

// The executor form of a call's op (avg becomes PreMulSum(1/n) for floating types and
// SumPostDiv(n) for integers, as in NCCL; a PreMulSum op as the call copied it).
ncclResult_t resolveRedOp(const ncclComm* comm, const CollOp& call, RedOpArgs* out);

// The tuning model's names for a call.
CollKind collKindOf(WorkKind kind);
size_t tunedBytes(const ncclComm* comm, const CollOp& op);

}  // namespace chorus
