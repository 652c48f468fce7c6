#include "src/executor/executor.h"

#include "device/cpu/lane_runner.h"

namespace chorus {

ncclResult_t GroupLaunch::start(bool go) {
  ncclResult_t result = ncclSuccess;
  for (const Launch& l : launches_) {  // each one returns at once
    const ncclResult_t r = l.executor->launch(l.comm, go);
    if (result == ncclSuccess) result = r;
  }
  if (go && result == ncclSuccess && !hostLanes_.empty()) result = runHostLanes(hostLanes_);
  return result;
}

void GroupLaunch::clear() {
  launches_.clear();
  hostLanes_.clear();
}

}  // namespace chorus
