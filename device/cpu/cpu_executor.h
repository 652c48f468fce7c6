// The CPU executor: runs the lanes of one or more communicators' plans on the
// calling thread, one fiber per lane, with device/common's programs.
#pragma once

#include <vector>

#include "device/common/work.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {

struct Lane {
  const CommView* comm;
  ExecContext* ctx;
  std::vector<WorkItem> items;  // run in order
};

// Runs every lane to completion (or until its communicator fails). Each lane's
// failure lands in its ExecContext. Returns ncclSystemError only if the lanes could
// not be started at all.
ncclResult_t runLanes(const std::vector<Lane*>& lanes);

}  // namespace chorus
