// Communicator life cycle and queries: version, error strings, count/rank/device,
// async errors, non-blocking communicators, finalize, abort, ncclMemAlloc, and
// entry points that may be unimplemented (they must not crash).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Version, ReportsNccl228) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 22800);
  EXPECT_LT(version, 22900);
  EXPECT_EQ(version, NCCL_VERSION_CODE) << "library and header disagree";
}

TEST(ErrorStrings, EveryCodeHasDistinctNonEmptyText) {
  std::set<std::string> texts;
  for (int code = ncclSuccess; code < ncclNumResults; ++code) {
    const char* text = ncclGetErrorString(static_cast<ncclResult_t>(code));
    ASSERT_NE(text, nullptr) << code;
    EXPECT_GT(std::strlen(text), 0u) << code;
    texts.insert(text);
  }
  EXPECT_EQ(texts.size(), static_cast<size_t>(ncclNumResults));
  EXPECT_NE(ncclGetErrorString(static_cast<ncclResult_t>(99)), nullptr);
}

class CommQueriesTest : public testing::TestWithParam<LaunchMode> {};

TEST_P(CommQueriesTest, CountRankDeviceAndAsyncError) {
  EXPECT_RANKS_OK(runRanks(GetParam(), 3, [](const RankContext& ctx) {
    FailureLog log;
    int count = -1, rank = -1, device = -1;
    ncclResult_t asyncError = ncclInternalError;
    if (ncclCommCount(ctx.comm, &count) != ncclSuccess || count != ctx.nranks) {
      log.add("ncclCommCount gave " + std::to_string(count));
    }
    if (ncclCommUserRank(ctx.comm, &rank) != ncclSuccess || rank != ctx.rank) {
      log.add("ncclCommUserRank gave " + std::to_string(rank));
    }
    if (ncclCommCuDevice(ctx.comm, &device) != ncclSuccess || device < 0) {
      log.add("ncclCommCuDevice gave " + std::to_string(device));
    }
    if (ncclCommGetAsyncError(ctx.comm, &asyncError) != ncclSuccess || asyncError != ncclSuccess) {
      log.add("ncclCommGetAsyncError on a healthy communicator gave " + resultName(asyncError));
    }
    return log.outcome();
  }));
}

INSTANTIATE_TEST_SUITE_P(Modes, CommQueriesTest, testing::Values(LaunchMode::kThreads, LaunchMode::kProcesses),
                         [](const testing::TestParamInfo<LaunchMode>& info) { return launchModeName(info.param); });

// Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress.
ncclResult_t waitWhileInProgress(ncclComm_t comm, std::chrono::seconds limit = std::chrono::seconds(60)) {
  Clock::time_point deadline = Clock::now() + limit;
  ncclResult_t state = ncclInProgress;
  while (Clock::now() < deadline) {
    ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ncclInProgress;
}

std::string checkSum(const std::vector<int32_t>& values, int nranks, const char* what) {
  int32_t expected = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      return std::string(what) + ": index " + std::to_string(i) + " expected " + std::to_string(expected) + " got " +
             std::to_string(values[i]);
    }
  }
  return "";
}

class NonBlockingTest : public testing::TestWithParam<LaunchMode> {};

TEST_P(NonBlockingTest, InitCollectiveFinalizeDestroyThroughAsyncError) {
  EXPECT_RANKS_OK(runRanksWithId(GetParam(), 2, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (init != ncclSuccess && init != ncclInProgress) {
      return RankOutcome::fail("non-blocking ncclCommInitRankConfig returned " + resultName(init));
    }
    ncclResult_t ready = waitWhileInProgress(comm);
    if (ready != ncclSuccess) return RankOutcome::fail("non-blocking init completed with " + resultName(ready));

    for (size_t count : {size_t{1}, size_t{70001}}) {
      std::vector<int32_t> values(count, rank + 1);
      ncclResult_t issued = ncclAllReduce(values.data(), values.data(), count, ncclInt32, ncclSum, comm, nullptr);
      if (issued != ncclSuccess && issued != ncclInProgress) {
        log.add("non-blocking AllReduce returned " + resultName(issued));
        continue;
      }
      ncclResult_t done = waitWhileInProgress(comm);
      if (done != ncclSuccess) log.add("non-blocking AllReduce completed with " + resultName(done));
      std::string problem = checkSum(values, nranks, "non-blocking AllReduce");
      if (!problem.empty()) log.add(problem);
    }
    ncclResult_t finalize = ncclCommFinalize(comm);
    if (finalize != ncclSuccess && finalize != ncclInProgress)
      log.add("ncclCommFinalize returned " + resultName(finalize));
    ncclResult_t finalized = waitWhileInProgress(comm);
    if (finalized != ncclSuccess) log.add("ncclCommFinalize completed with " + resultName(finalized));
    ncclResult_t destroy = ncclCommDestroy(comm);
    if (destroy != ncclSuccess) log.add("ncclCommDestroy returned " + resultName(destroy));
    return log.outcome();
  }));
}

INSTANTIATE_TEST_SUITE_P(Modes, NonBlockingTest, testing::Values(LaunchMode::kThreads, LaunchMode::kProcesses),
                         [](const testing::TestParamInfo<LaunchMode>& info) { return launchModeName(info.param); });

// Calls queued behind an init that fails (in its group; on a non-blocking communicator's
// worker) fail with the init's error rather than run on a communicator never set up.
TEST(CommLifecycle, CallsQueuedBehindAFailedInitFailWithoutRunning) {
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));  // no root serves it: the init fails at once
  for (int blocking : {1, 0}) {
    SCOPED_TRACE(blocking ? "blocking" : "non-blocking");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking;
    float x = 1, y = 0;
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    (void)ncclCommInitRankConfig(&comm, 2, id, 0, &config);
    (void)ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr);
    const ncclResult_t end = ncclGroupEnd();
    ASSERT_NE(comm, nullptr);
    const ncclResult_t settled = waitWhileInProgress(comm);
    if (blocking) {
      EXPECT_NE(end, ncclSuccess);
    } else {
      EXPECT_TRUE(end == ncclInProgress || end != ncclSuccess) << resultName(end);
    }
    EXPECT_NE(settled, ncclSuccess) << "the failed init is the communicator's error";
    EXPECT_EQ(y, 0.0f) << "nothing ran";
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  }
}

TEST(CommLifecycle, BlockingConfigFinalizeThenDestroy) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 3, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    config.commName = "lifecycle-test";
    ncclComm_t comm = nullptr;
    ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (init != ncclSuccess) return RankOutcome::fail("blocking ncclCommInitRankConfig returned " + resultName(init));
    std::vector<int32_t> values(4097, rank + 1);
    ncclResult_t reduced =
        ncclAllReduce(values.data(), values.data(), values.size(), ncclInt32, ncclSum, comm, nullptr);
    if (reduced != ncclSuccess) log.add("AllReduce returned " + resultName(reduced));
    std::string problem = checkSum(values, nranks, "AllReduce before finalize");
    if (!problem.empty()) log.add(problem);
    ncclResult_t finalize = ncclCommFinalize(comm);
    if (finalize != ncclSuccess) log.add("blocking ncclCommFinalize returned " + resultName(finalize));
    ncclResult_t destroy = ncclCommDestroy(comm);
    if (destroy != ncclSuccess) log.add("ncclCommDestroy after finalize returned " + resultName(destroy));
    return log.outcome();
  }));
}

// Config structs from older headers are smaller; the library must accept them.
TEST(CommLifecycle, AcceptsConfigWithUndefinedFieldsAndOlderSize) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, splitShare);  // an NCCL 2.14-sized struct
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

class AbortTest : public testing::TestWithParam<LaunchMode> {};

TEST_P(AbortTest, AbortAfterWorkAndWithoutWork) {
  EXPECT_RANKS_OK(runRanksWithId(GetParam(), 2, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclComm_t comm = nullptr;
    ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
    if (init != ncclSuccess) return RankOutcome::fail("ncclCommInitRank returned " + resultName(init));
    std::vector<int32_t> values(1000, rank + 1);
    ncclResult_t reduced =
        ncclAllReduce(values.data(), values.data(), values.size(), ncclInt32, ncclSum, comm, nullptr);
    if (reduced != ncclSuccess) log.add("AllReduce returned " + resultName(reduced));
    std::string problem = checkSum(values, nranks, "AllReduce before abort");
    if (!problem.empty()) log.add(problem);
    ncclResult_t aborted = ncclCommAbort(comm);
    if (aborted != ncclSuccess) log.add("ncclCommAbort returned " + resultName(aborted));
    return log.outcome();
  }));
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

INSTANTIATE_TEST_SUITE_P(Modes, AbortTest, testing::Values(LaunchMode::kThreads, LaunchMode::kProcesses),
                         [](const testing::TestParamInfo<LaunchMode>& info) { return launchModeName(info.param); });

// Whether the CUDA driver sees a GPU (asked directly: these tests use the public API only).
bool gpuPresent() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return false;
  auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<int (*)(int*)>(dlsym(driver, "cuDeviceGetCount"));
  int n = 0;
  const bool present = init && count && init(0) == 0 && count(&n) == 0 && n > 0;
  dlclose(driver);
  return present;
}

TEST(MemAlloc, HostUsableBuffersForCollectives) {
  // Where a GPU is present ncclMemAlloc gives device memory, as NCCL (tests/gpu checks it).
  if (gpuPresent()) GTEST_SKIP() << "a GPU is present: ncclMemAlloc returns device memory";
  const size_t count = 65536 + 5;
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_EQ(ncclMemAlloc(&send, count * sizeof(float)), ncclSuccess);
  ASSERT_EQ(ncclMemAlloc(&recv, count * sizeof(float)), ncclSuccess);
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  EXPECT_NE(send, recv);
  auto* sendValues = static_cast<float*>(send);
  for (size_t i = 0; i < count; ++i) sendValues[i] = static_cast<float>(i % 100);  // host-writable
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<float> otherSend(count, 1.0f), otherRecv(count, 0.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(otherSend.data(), otherRecv.data(), count, ncclFloat32, ncclSum, comms[1], nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  const auto* recvValues = static_cast<const float*>(recv);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(recvValues[i], static_cast<float>(i % 100) + 1.0f) << "index " << i;
    ASSERT_EQ(otherRecv[i], recvValues[i]) << "index " << i;
  }
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclMemFree(send), ncclSuccess);
  EXPECT_EQ(ncclMemFree(recv), ncclSuccess);
  EXPECT_EQ(ncclMemAlloc(nullptr, 16), ncclInvalidArgument);
}

// Whether these are implemented is the lead's call (README says which are not);
// here they only have to return without crashing, in a child so state they leave
// (an open group, say) cannot leak into other tests.
TEST(OptionalEntryPoints, ReturnWithoutCrashing) {
  RankOutcome outcome = runInChildProcess(
      [] {
        ncclComm_t comm = nullptr;
        if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return RankOutcome::fail("ncclCommInitAll failed");
        ncclComm_t split = nullptr;
        if (ncclCommSplit(comm, 0, 0, &split, nullptr) == ncclSuccess && split != nullptr) ncclCommDestroy(split);
        ncclComm_t shrunk = nullptr;
        if (ncclCommShrink(comm, nullptr, 0, &shrunk, nullptr, NCCL_SHRINK_DEFAULT) == ncclSuccess &&
            shrunk != nullptr) {
          ncclCommDestroy(shrunk);
        }
        std::vector<char> window(2 * NCCL_WIN_REQUIRED_ALIGNMENT);
        ncclWindow_t win = nullptr;
        if (ncclCommWindowRegister(comm, window.data(), window.size(), &win, NCCL_WIN_DEFAULT) == ncclSuccess) {
          ncclCommWindowDeregister(comm, win);
        }
        void* handle = nullptr;
        if (ncclCommRegister(comm, window.data(), window.size(), &handle) == ncclSuccess)
          ncclCommDeregister(comm, handle);
        ncclSimInfo_t simInfo = NCCL_SIM_INFO_INITIALIZER;
        ncclGroupStart();
        ncclGroupSimulateEnd(&simInfo);  // closes the group, whether or not it fails
        ncclCommDestroy(comm);
        return RankOutcome::pass();
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace chorus_test
