// The states a communicator goes through and what each allows, with NCCL's answers
// (measured on NCCL 2.29-2.31): not ready while a non-blocking set-up runs, finalized
// once, revoked once; calls from one thread at a time; and memory windows on host memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

std::string lastError() { return ncclGetLastError(nullptr); }

// A non-blocking communicator, once its init has settled; null if it failed.
ncclComm_t initNonBlocking(int rank, int nranks, const ncclUniqueId& id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (comm != nullptr && settle(comm) == ncclSuccess) return comm;
  if (comm != nullptr) ncclCommAbort(comm);
  return nullptr;
}

// One rank of two calls a non-blocking init; the other never comes. Using the
// communicator before its set-up finished is refused; a call's error stays the
// communicator's, a query's does not.
TEST(CommState, UsedBeforeItsSetUpFinished) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t early = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&early, 2, id, 0, &config), ncclInProgress);
  int count = -1;
  EXPECT_EQ(ncclCommCount(early, &count), ncclInvalidArgument);
  EXPECT_NE(lastError().find("not ready"), std::string::npos) << lastError();
  ncclResult_t state = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(early, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress) << "a refused query leaves the set-up running, as NCCL's ncclCommEnsureReady";
  std::vector<float> data(4, 1.0f);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), 4, ncclFloat32, ncclSum, early, nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclCommGetAsyncError(early, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInvalidArgument) << "the communicator keeps a refused call's error";
  EXPECT_EQ(ncclCommAbort(early), ncclSuccess) << "abort ends the set-up that waits for rank 1";
}

// A query refused while the set-up runs leaves the communicator to finish it and work:
// both ranks' AllReduce after it is exact (it left rank 0 failed for good, and rank 1
// waiting for it, before).
TEST(CommState, AQueryBeforeTheSetUpFinishedLeavesItUsable) {
  static std::atomic<bool> queried{false};  // rank 1 joins only then: rank 0's set-up cannot have finished
  queried = false;
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    if (rank == 1) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!queried.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (rank == 0) {
      int count = -1;
      const ncclResult_t early = ncclCommCount(comm, &count);
      queried = true;
      if (early != ncclInvalidArgument)
        return RankOutcome::fail("the early ncclCommCount returned " + resultName(early));
    }
    if (const ncclResult_t state = settle(comm); state != ncclSuccess)
      return RankOutcome::fail("the set-up settled at " + resultName(state));
    std::vector<int32_t> data(64, rank + 1);
    ncclAllReduce(data.data(), data.data(), data.size(), ncclInt32, ncclSum, comm, nullptr);
    const ncclResult_t done = settle(comm);
    const bool exact = data[0] == 3 && data[63] == 3;
    ncclCommDestroy(comm);
    if (done != ncclSuccess) return RankOutcome::fail("AllReduce: " + resultName(done));
    return exact ? RankOutcome::pass() : RankOutcome::fail("AllReduce: wrong sum");
  }));
}

// Calls on a communicator whose blocking init is pending in the caller's group are fine:
// the group's end sets it up before running them.
TEST(CommState, CallsInTheGroupOfTheInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(2, nullptr);
  std::vector<std::vector<int32_t>> data(2);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
    data[r].assign(16, r + 1);
    EXPECT_EQ(ncclAllReduce(data[r].data(), data[r].data(), 16, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(data[0][15], 3);
  EXPECT_EQ(data[1][0], 3);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}

TEST(CommState, NullHandlesAreNoOpsWhereNcclSaysSo) {
  EXPECT_EQ(ncclCommFinalize(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(nullptr, NCCL_REVOKE_DEFAULT), ncclSuccess);
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &state), ncclInvalidArgument);
}

TEST(CommState, FinalizeOnceThenOnlyDestroy) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommFinalize(c), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(comms[0]), ncclInvalidArgument);
  EXPECT_NE(lastError().find("already finalized"), std::string::npos) << lastError();
  std::vector<int32_t> data(4, 1);
  EXPECT_EQ(ncclAllReduce(data.data(), data.data(), 4, ncclInt32, ncclSum, comms[0], nullptr), ncclInvalidUsage);
  // Nor a split, shrink or grow: each would give a working child of a finalized parent.
  ncclComm_t child = nullptr;
  EXPECT_EQ(ncclCommSplit(comms[0], 0, 0, &child, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("finalized"), std::string::npos) << lastError();
  EXPECT_EQ(child, nullptr);
  int excluded = 1;
  EXPECT_EQ(ncclCommShrink(comms[0], &excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidUsage);
  EXPECT_EQ(ncclCommGrow(comms[0], 3, nullptr, -1, &child, nullptr), ncclInvalidUsage);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// A non-blocking communicator's finalize is its last job: ncclInProgress, then settled.
TEST(CommState, NonBlockingFinalizeIsInProgressThenSettles) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = initNonBlocking(rank, nranks, id);
    if (comm == nullptr) return RankOutcome::fail("init did not settle");
    std::vector<int32_t> data(64, rank + 1);
    ncclAllReduce(data.data(), data.data(), 64, ncclInt32, ncclSum, comm, nullptr);
    if (settle(comm) != ncclSuccess || data[63] != 3) return RankOutcome::fail("AllReduce before finalize failed");
    const ncclResult_t finalize = ncclCommFinalize(comm);
    if (finalize != ncclInProgress) return RankOutcome::fail("finalize returned " + resultName(finalize));
    if (settle(comm) != ncclSuccess) return RankOutcome::fail("finalize did not settle");
    if (ncclCommDestroy(comm) != ncclSuccess) return RankOutcome::fail("destroy failed");
    return RankOutcome::pass();
  }));
}

// A non-blocking communicator takes calls while earlier ones still run on its worker (the
// state stays ncclInProgress): each runs once, in order, and every result is right.
TEST(CommState, NonBlockingCallsIssuedBackToBackAllComplete) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = initNonBlocking(rank, nranks, id);
    if (comm == nullptr) return RankOutcome::fail("init did not settle");
    constexpr int kCalls = 2000;
    std::vector<std::vector<int32_t>> data(kCalls);
    for (int call = 0; call < kCalls; ++call) {
      data[call].assign(16, call + rank);
      const ncclResult_t r = ncclAllReduce(data[call].data(), data[call].data(), 16, ncclInt32, ncclSum, comm, nullptr);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclCommAbort(comm);
        return RankOutcome::fail("call " + std::to_string(call) + " returned " + resultName(r));
      }
    }
    const ncclResult_t settled = settle(comm);
    ncclCommDestroy(comm);
    if (settled != ncclSuccess)
      return RankOutcome::fail("the calls settled at " + resultName(settled) + ": " + lastError());
    for (int call = 0; call < kCalls; ++call) {
      for (int32_t value : data[call]) {
        if (value != 2 * call + 1) {
          return RankOutcome::fail("call " + std::to_string(call) + " gave " + std::to_string(value) + ", not " +
                                   std::to_string(2 * call + 1));
        }
      }
    }
    return RankOutcome::pass();
  }));
}

// NCCL: "multiple threads should use separate communicator objects". While one thread's open
// group holds calls of a communicator, another thread's call on it (a collective, a split) is
// refused with a WARN (not interleaved), and the communicator is the other thread's again
// once the group ran.
TEST(CommState, AnotherThreadsCallIsRefusedWhileAGroupHoldsTheCommunicator) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<float> mine(256, 1.0f), theirs(256, 2.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(mine.data(), mine.data(), mine.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  ncclResult_t refused = ncclSuccess, splitRefused = ncclSuccess, later = ncclInternalError;
  std::string why;
  ncclComm_t child = nullptr;
  std::thread([&] {
    refused = ncclAllReduce(theirs.data(), theirs.data(), theirs.size(), ncclFloat32, ncclMax, comm, nullptr);
    why = lastError();
    splitRefused = ncclCommSplit(comm, 0, 0, &child, nullptr);  // a job of the parent's, as its calls
  }).join();
  EXPECT_EQ(refused, ncclInvalidUsage);
  EXPECT_NE(why.find("in use by another thread"), std::string::npos) << why;
  EXPECT_EQ(splitRefused, ncclInvalidUsage);
  EXPECT_EQ(child, nullptr);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << "the refusal is the other thread's, not this group's: " << lastError();
  std::thread([&] {
    later = ncclAllReduce(theirs.data(), theirs.data(), theirs.size(), ncclFloat32, ncclMax, comm, nullptr);
  }).join();
  EXPECT_EQ(later, ncclSuccess) << "after the group ran, another thread may call";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A thread that ends inside a group (no ncclGroupEnd): its calls never run, and the
// communicator is not left claimed by it. Later threads (whose thread-local group state
// may land at the dead one's address) get their calls run, not queued into that group.
TEST(CommState, AThreadEndingInsideAGroupLetsGoOfItsCommunicator) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  std::vector<float> send(64, 3.0f), abandoned(64, 0.0f);
  std::thread([&] {
    ncclGroupStart();
    ncclAllReduce(send.data(), abandoned.data(), send.size(), ncclFloat32, ncclSum, comm, nullptr);
  }).join();
  for (int round = 0; round < 3; ++round) {
    std::vector<float> got(64, 0.0f);
    ncclResult_t r = ncclInternalError;
    std::thread([&] {
      r = ncclAllReduce(send.data(), got.data(), send.size(), ncclFloat32, ncclSum, comm, nullptr);
    }).join();
    EXPECT_EQ(r, ncclSuccess) << "round " << round << ": " << lastError();
    EXPECT_EQ(got, send) << "round " << round << ": the call returned without running";
  }
  EXPECT_EQ(abandoned, std::vector<float>(64, 0.0f)) << "the dead thread's group ran";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(CommState, RevokeIsLocalAndOnce) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(comms[0], 1), ncclInvalidArgument);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(comms[0], NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  EXPECT_NE(lastError().find("already revoked"), std::string::npos) << lastError();
  ncclResult_t state = ncclInProgress;
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess) << "an idle communicator is quiescent at once";
  std::vector<int32_t> data(4, 1);
  EXPECT_EQ(ncclSend(data.data(), 4, ncclInt32, 1, comms[0], nullptr), ncclInvalidUsage);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(CommState, RevokingANonBlockingCommunicatorIsInProgress) {
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    ncclComm_t comm = initNonBlocking(rank, nranks, id);
    if (comm == nullptr) return RankOutcome::fail("init did not settle");
    const ncclResult_t revoked = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
    if (revoked != ncclInProgress) return RankOutcome::fail("revoke returned " + resultName(revoked));
    if (settle(comm) != ncclSuccess) return RankOutcome::fail("revoke did not settle");
    ncclCommDestroy(comm);
    return RankOutcome::pass();
  }));
}

// A window is the registering rank's record of its buffer: collectives on the buffer work,
// ncclWinGetUserPtr gives the buffer back, and a window belongs to its communicator only.
TEST(CommState, WindowsOnHostMemory) {
  std::vector<ncclComm_t> comms(2, nullptr), others(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommInitAll(others.data(), 2, nullptr), ncclSuccess);
  std::vector<void*> mem(2, nullptr);
  std::vector<ncclWindow_t> win(2, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclMemAlloc(&mem[r], 1 << 16), ncclSuccess);
    EXPECT_EQ(ncclCommWindowRegister(comms[r], mem[r], 1 << 16, &win[r], NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(win[r], nullptr);
    void* user = nullptr;
    EXPECT_EQ(ncclWinGetUserPtr(comms[r], win[r], &user), ncclSuccess);
    EXPECT_EQ(user, mem[r]);
    for (int k = 0; k < 4; ++k) static_cast<float*>(mem[r])[k] = 1.0f + r;
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ncclAllReduce(mem[r], static_cast<char*>(mem[r]) + 4096, 4, ncclFloat32, ncclSum, comms[r], nullptr);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(reinterpret_cast<float*>(static_cast<char*>(mem[r]) + 4096)[3], 3.0f);

  void* user = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(ncclWinGetUserPtr(others[0], win[0], &user), ncclInvalidArgument) << "a window of another communicator";
  EXPECT_EQ(user, nullptr);
  EXPECT_EQ(ncclCommWindowDeregister(others[0], win[0]), ncclInvalidArgument);
  EXPECT_NE(lastError().find("not a window of communicator"), std::string::npos) << lastError();
  EXPECT_EQ(ncclWinGetUserPtr(comms[0], nullptr, &user), ncclSuccess) << "a NULL window (NCCL 2.31)";
  EXPECT_EQ(user, nullptr);
  ncclWindow_t w = reinterpret_cast<ncclWindow_t>(0x1);
  EXPECT_EQ(ncclCommWindowRegister(comms[0], mem[0], 4096, nullptr, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowRegister(nullptr, mem[0], 4096, &w, 0), ncclInvalidArgument);
  EXPECT_EQ(w, nullptr);
  EXPECT_EQ(ncclCommWindowRegister(comms[0], mem[0], 0, &w, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowRegister(comms[0], mem[0], 4096, &w, 0x10), ncclInvalidArgument);
  EXPECT_EQ(ncclCommWindowDeregister(comms[0], nullptr), ncclSuccess);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(comms[0], win[0]), ncclInvalidArgument) << "deregistered twice";
  for (int r = 0; r < 2; ++r) {
    ncclMemFree(mem[r]);
    ncclCommDestroy(comms[r]);
    ncclCommDestroy(others[r]);
  }
}

}  // namespace
}  // namespace chorus_test
