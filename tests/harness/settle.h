// A non-blocking communicator's state once its work has settled: polls
// ncclCommGetAsyncError until it is no longer ncclInProgress, or `limit` passes
// (then ncclInProgress). A failed poll is returned as such.
#pragma once

#include <chrono>
#include <thread>

#include "nccl.h"

namespace chorus_test {

inline ncclResult_t settle(ncclComm_t comm, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    if (const ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

}  // namespace chorus_test
