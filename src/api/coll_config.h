// ncclCollConfig_t as the nccl*Config entry points read it (NCCL 2.32's layout). Every
// check looks at the config alone, never at the communicator, so a refused config fails
// its own call before anything is queued and, inside a group, leaves the group working
// (as NCCL 2.31 does).
#pragma once

#include "nccl.h"
#include "src/comm/comm.h"
#include "src/tune/tuner.h"

namespace chorus {

// Reads `config` (NULL: the plain call) for a call of `coll` into what the tuner and the
// planner honour: the algorithms algSelection leaves, the channel bound of maxCTAs.
// Refused with ncclInvalidArgument and a WARN naming `func`, the field and its value, in
// this order: a struct smaller than NCCL 2.31's, a wrong magic, forceAlgSelection other
// than 0 or 1, CTAPolicy outside NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO, and,
// when forced, an algSelection that names an unknown algorithm, names none, or leaves
// `coll` nothing it can run (by itself or with NCCL_ALGO). Unforced, such a selection
// means the automatic choice.
ncclResult_t readCollConfig(const ncclCollConfig_t* config, CollKind coll, const char* func, CallTuning* out);

// Names the fields `config` sets that have no effect here, once per communicator and field:
// INFO for hints, WARN for launchCompletionEvent (a promise Chorus does not keep yet).
void nameUnusedCollConfigFields(ncclComm* comm, const ncclCollConfig_t* config, const char* func);

}  // namespace chorus
