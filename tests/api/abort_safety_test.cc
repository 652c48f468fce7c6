// ncclCommAbort and ncclCommDestroy are memory-safe in the orders users hit:
//  - an abort from another thread while a blocking ncclCommInitRank waits for a rank that
//    never comes: the init fails, the communicator is freed once (20 times in a row);
//  - an abort of one communicator of an ncclCommInitAll set: a survivor already waiting on
//    it is released, and a later call on a survivor fails instead of touching freed memory;
//  - a destroy of a communicator with calls queued in the open group is refused (the group
//    still runs), an abort drops them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool isFailure(ncclResult_t r) { return r == ncclRemoteError || r == ncclSystemError; }

TEST(AbortSafety, AbortDuringABlockingInitFreesItOnce) {
  for (int iteration = 0; iteration < 20; ++iteration) {
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t comm = nullptr;
    std::atomic_ref<ncclComm_t> handle(comm);
    ncclResult_t initResult = ncclSuccess;
    const auto start = Clock::now();
    // Rank 1 never joins: the init waits until it is aborted.
    std::thread init([&] { initResult = ncclCommInitRank(&comm, 2, id, 0); });
    while (handle.load() == nullptr && secondsSince(start) < 10) std::this_thread::yield();
    ncclComm_t seen = handle.load();
    ASSERT_NE(seen, nullptr) << "ncclCommInitRank publishes the handle before its set-up, as NCCL";
    if (iteration % 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // before and during the wait
    EXPECT_EQ(ncclCommAbort(seen), ncclSuccess);
    init.join();
    EXPECT_TRUE(isFailure(initResult)) << "iteration " << iteration << ": the aborted init returned " << initResult;
    EXPECT_EQ(comm, nullptr) << "a failed init leaves the handle NULL";
    EXPECT_LT(secondsSince(start), 10.0);
  }
}

TEST(AbortSafety, AbortOfOneRankReleasesAWaitingSurvivor) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<float> data(1 << 16, 1.0f);
  ncclResult_t waited = ncclSuccess;
  const auto start = Clock::now();
  std::thread survivor([&] {  // rank 0 never joins this AllReduce
    waited = ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comms[1], nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  survivor.join();
  EXPECT_TRUE(isFailure(waited)) << "the waiting survivor returned " << waited;
  EXPECT_LT(secondsSince(start), 10.0) << "the survivor was not released at once";
  // A later call on the survivor fails too; it does not write into the aborted rank's memory.
  EXPECT_TRUE(isFailure(ncclAllReduce(data.data(), data.data(), 16, ncclFloat32, ncclSum, comms[1], nullptr)));
  EXPECT_EQ(ncclCommDestroy(comms[1]), ncclSuccess);
}

TEST(AbortSafety, CallsOnASurvivorAfterAnAbortFail) {
  for (int iteration = 0; iteration < 10; ++iteration) {
    std::vector<ncclComm_t> comms(3, nullptr);
    ASSERT_EQ(ncclCommInitAll(comms.data(), 3, nullptr), ncclSuccess);
    std::vector<std::vector<int32_t>> data(3, std::vector<int32_t>(4096, 1));
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // every connection in use once
    for (int r = 0; r < 3; ++r)
      ncclAllReduce(data[r].data(), data[r].data(), data[r].size(), ncclInt32, ncclSum, comms[r], nullptr);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(ncclCommAbort(comms[iteration % 3]), ncclSuccess);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 3; ++r) {
      if (r == iteration % 3) continue;
      ncclAllReduce(data[r].data(), data[r].data(), data[r].size(), ncclInt32, ncclSum, comms[r], nullptr);
    }
    EXPECT_TRUE(isFailure(ncclGroupEnd())) << "iteration " << iteration;
    for (int r = 0; r < 3; ++r) {
      if (r != iteration % 3) {
        EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
      }
    }
  }
}

TEST(AbortSafety, DestroyRefusesQueuedGroupWorkAndAbortDropsIt) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<std::vector<int32_t>> data(2, std::vector<int32_t>(64));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    data[r].assign(64, r + 1);
    ncclAllReduce(data[r].data(), data[r].data(), 64, ncclInt32, ncclSum, comms[r], nullptr);
  }
  EXPECT_EQ(ncclCommDestroy(comms[0]), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[0])).find("queued in this thread's open group"), std::string::npos)
      << ncclGetLastError(comms[0]);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << "the refused destroy left the group intact";
  EXPECT_EQ(data[0][63], 3);
  EXPECT_EQ(data[1][0], 3);
  // An abort inside the group drops that communicator's calls; its peer's then fail.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ncclAllReduce(data[r].data(), data[r].data(), 64, ncclInt32, ncclSum, comms[r], nullptr);
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  const auto start = Clock::now();
  EXPECT_TRUE(isFailure(ncclGroupEnd()));
  EXPECT_LT(secondsSince(start), 10.0);
  EXPECT_EQ(ncclCommDestroy(comms[1]), ncclSuccess);
}

}  // namespace
}  // namespace chorus_test
