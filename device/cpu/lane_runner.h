// The CPU executor's device side: runs the lanes of one or more communicators' plans on
// the calling thread, one fiber per lane, with device/common's programs.
#pragma once

#include <vector>

#include "device/common/work.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {

// A lane as the CPU runs it: the plan's lane and its communicator's run state.
struct HostLane {
  const Lane* lane;
  ExecContext* ctx;
};

// Runs every lane to completion (or until its communicator fails). Each lane's
// failure lands in its ExecContext. Returns ncclSystemError only if the lanes could
// not be started at all.
ncclResult_t runHostLanes(const std::vector<const HostLane*>& lanes);

}  // namespace chorus
