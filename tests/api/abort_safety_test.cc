// ncclCommAbort and ncclCommDestroy are memory-safe in the orders users hit:
//  - an abort from another thread while a blocking ncclCommInitRank waits for a rank that
//    never comes: the init fails, the communicator is freed once (20 times in a row);
//  - an abort of one communicator of an ncclCommInitAll set: a survivor already waiting on
//    it is released, and a later call on a survivor fails instead of touching freed memory;
//  - a destroy of a communicator with calls queued in the open group is refused (the group
//    still runs), an abort drops them;
//  - an abort or destroy on one thread and calls on others at the same instant: a call
//    already inside finishes first, a later one fails as on a destroyed communicator, and
//    a group that held calls of it fails at its end, even when a new communicator took the
//    freed address meanwhile;
//  - an abort of a split's new communicator before its set-up job has run: the job frees it
//    (run under AddressSanitizer before landing).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
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

// A call inside the communicator on another thread (held there by CHORUS_FAULT's delay)
// when ncclCommDestroy comes: the destroy waits for it, and the call completes correctly.
TEST(AbortSafety, DestroyWaitsForACallInsideOnAnotherThread) {
  ScopedEnv env;
  env.set("CHORUS_FAULT", "rank0:delay=500ms@AllReduce");
  const TuningLogCapture log(env, "INIT");  // the delay's WARN says the call is inside
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<float> in(256, 2.5f), out(256, 0.0f);
  ncclResult_t called = ncclInternalError;
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    called = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
    returned = true;
  });
  auto delaying = [&log] {
    for (const std::string& line : log.lines())
      if (line.find("CHORUS_FAULT: rank 0 delaying AllReduce") != std::string::npos) return true;
    return false;
  };
  const auto start = Clock::now();
  while (!delaying() && !returned && secondsSince(start) < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(returned.load()) << "the call ended before its delay was seen";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_TRUE(returned.load()) << "ncclCommDestroy returned while another thread's call was inside";
  caller.join();
  EXPECT_EQ(called, ncclSuccess);
  EXPECT_EQ(out[0], 2.5f);
  EXPECT_EQ(out[255], 2.5f);
}

// Another thread destroys a communicator that this thread's open group holds a call of:
// the group's end fails with ncclInvalidUsage and touches nothing of it. Every other round
// a new communicator is made meanwhile (glibc usually gives it the freed address) and the
// open group queues a call of the new one too: the group still fails, and that call does
// not stay queued on the new communicator, whose next lone call runs.
TEST(AbortSafety, AGroupHoldingCallsOfACommunicatorDestroyedElsewhereFailsAtItsEnd) {
  for (int iteration = 0; iteration < 20; ++iteration) {
    const bool remake = iteration % 2 == 1;
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
    ncclComm_t fresh = nullptr;
    std::vector<int32_t> data(64, 7);
    std::atomic<int> phase{0};  // 1: the call is queued; 2: the communicator is destroyed
    ncclResult_t queued = ncclInternalError, queuedFresh = ncclSuccess, ended = ncclInternalError;
    std::thread grouping([&] {
      ncclGroupStart();
      queued = ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, comm, nullptr);
      phase = 1;
      while (phase.load() != 2) std::this_thread::yield();
      if (fresh != nullptr)
        queuedFresh = ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, fresh, nullptr);
      ended = ncclGroupEnd();
    });
    while (phase.load() != 1) std::this_thread::yield();
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << "another thread's open group is not this thread's";
    if (remake) {
      ASSERT_EQ(ncclCommInitAll(&fresh, 1, nullptr), ncclSuccess);
    }
    phase = 2;
    grouping.join();
    EXPECT_EQ(queued, ncclSuccess);
    EXPECT_EQ(queuedFresh, ncclSuccess);
    EXPECT_EQ(ended, ncclInvalidUsage) << "iteration " << iteration;
    if (!remake) continue;
    std::vector<int32_t> in(64, 3), out(64, 0);
    EXPECT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, fresh, nullptr), ncclSuccess);
    EXPECT_EQ(out[63], 3) << "iteration " << iteration << ": the lone call did not run";
    EXPECT_EQ(ncclCommDestroy(fresh), ncclSuccess);
  }
}

// The new communicator of a split, aborted before its set-up job has run (inside a group,
// and on a non-blocking parent, whose worker runs the job): the job's end frees it, nothing
// runs on freed memory, and the parent keeps working.
TEST(AbortSafety, AbortOfASplitsNewCommunicatorBeforeItsSetUpRuns) {
  for (const bool blocking : {true, false}) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t parent = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&parent, 1, id, 0, &config);
    ncclResult_t async = ncclInProgress;
    auto settle = [&] {
      const auto start = Clock::now();
      do {
        ASSERT_EQ(ncclCommGetAsyncError(parent, &async), ncclSuccess);
      } while (async == ncclInProgress && secondsSince(start) < 30);
      ASSERT_EQ(async, ncclSuccess);
    };
    ASSERT_TRUE(r == ncclSuccess || r == ncclInProgress);
    settle();
    for (int iteration = 0; iteration < 10; ++iteration) {
      ncclComm_t child = nullptr;
      if (blocking) {
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      }
      ASSERT_EQ(ncclCommSplit(parent, 0, 0, &child, nullptr), ncclSuccess);
      ASSERT_NE(child, nullptr) << "published before its set-up ran";
      EXPECT_EQ(ncclCommAbort(child), ncclSuccess);
      if (blocking) {
        EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << "the parent's own part of the split succeeded";
      }
      settle();
      std::vector<float> in(16, 1.5f), out(16, 0.0f);
      r = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, parent, nullptr);
      ASSERT_TRUE(r == ncclSuccess || r == ncclInProgress);
      settle();
      EXPECT_EQ(out[15], 1.5f) << (blocking ? "blocking" : "non-blocking") << " parent, iteration " << iteration;
    }
    EXPECT_EQ(ncclCommDestroy(parent), ncclSuccess);
  }
}

// Two threads call on a communicator without pause while a third aborts or destroys it at
// a different instant each time: every call answers (success before, a refusal after; an
// abort may also fail a call it interrupts), nothing crashes, and the callers stop.
TEST(AbortSafety, CallsRacingAnAbortOrDestroyOnAnotherThreadAnswerCleanly) {
  for (int iteration = 0; iteration < 100; ++iteration) {
    const bool abort = iteration % 2 == 0;
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
    std::atomic<int> started{0};
    ncclResult_t last[2] = {ncclSuccess, ncclSuccess};
    auto caller = [&](int who) {
      std::vector<float> values(32, 1.0f);
      int count = 0;
      ncclResult_t async = ncclSuccess;
      ++started;
      for (int call = 0; last[who] == ncclSuccess; ++call) {
        last[who] =
            who == 0 ? ncclAllReduce(values.data(), values.data(), values.size(), ncclFloat32, ncclMax, comm, nullptr)
                     : (call % 2 ? ncclCommCount(comm, &count) : ncclCommGetAsyncError(comm, &async));
      }
    };
    std::thread first(caller, 0), second(caller, 1);
    while (started.load() != 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(37 * iteration));
    EXPECT_EQ(abort ? ncclCommAbort(comm) : ncclCommDestroy(comm), ncclSuccess);
    first.join();
    second.join();
    for (ncclResult_t r : last) {
      const bool expected = r == ncclInvalidUsage || (abort && isFailure(r));
      EXPECT_TRUE(expected) << "iteration " << iteration << ": a call ended with " << r;
    }
  }
}

}  // namespace
}  // namespace chorus_test
