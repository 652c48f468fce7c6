// What ncclGroupSimulateEnd predicts for one AllReduce (float sum, in place) on `comm`:
// the tuning model's time in us, for the GPU host-path tests' prediction tables.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>

#include "nccl.h"

namespace chorus::fixtures {

inline double predictedAllReduceUs(ncclComm_t comm, float* buf, size_t bytes) {
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf, buf, bytes / sizeof(float), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
  return static_cast<double>(info.estimatedTime);
}

}  // namespace chorus::fixtures
