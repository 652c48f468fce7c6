// ncclCommSuspend with NCCL_SUSPEND_MEM gives the FIFOs' slot memory back to the system
// (measured as the process's resident memory: private pages for ranks as threads, /dev/shm
// pages for ranks as processes), ncclCommResume brings it back at its next use with
// results exact, and a connection holding data not yet received keeps it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "harness/byte_pattern.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// A field of /proc/self/status in KiB ("RssAnon", "RssShmem"); -1 when absent.
long statusKiB(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

constexpr size_t kCount = 8 << 20;  // 32 MiB of floats: every Simple slot is written
// Half of one connection's Simple buffer (NCCL_BUFFSIZE, 4 MiB): the kernel's resident counts may lag
// by some pages, and without a release nothing frees any.
constexpr long kAtLeastKiB = 2048;

// AllReduces of kCount ones on every rank of `comms` (one thread), checking the sums.
bool allReduceOnes(const std::vector<ncclComm_t>& comms, std::vector<std::vector<float>>& data) {
  if (ncclGroupStart() != ncclSuccess) return false;
  for (size_t r = 0; r < comms.size(); ++r) {
    data[r].assign(kCount, 1.0f);
    ncclAllReduce(data[r].data(), data[r].data(), kCount, ncclFloat32, ncclSum, comms[r], nullptr);
  }
  if (ncclGroupEnd() != ncclSuccess) return false;
  for (const auto& d : data)
    for (size_t i = 0; i < kCount; i += 4099)
      if (d[i] != static_cast<float>(comms.size())) return false;
  return true;
}

TEST(SuspendMemory, ThreadsReleasePrivatePagesAndResumeExactly) {
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<std::vector<float>> data(2);
  ASSERT_TRUE(allReduceOnes(comms, data));
  const long before = statusKiB("RssAnon");
  ASSERT_GT(before, 0) << "no RssAnon in /proc/self/status";
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommSuspend(c, NCCL_SUSPEND_MEM), ncclSuccess);
  const long after = statusKiB("RssAnon");
  EXPECT_GE(before - after, kAtLeastKiB) << "resident anonymous memory went from " << before << " to " << after
                                         << " KiB";
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommResume(c), ncclSuccess);
  EXPECT_TRUE(allReduceOnes(comms, data)) << "after resume";
  EXPECT_TRUE(allReduceOnes(comms, data)) << "and again";
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// Rank 0's send completes into rank 1's FIFO before rank 1 receives; suspending both must
// not lose it.
TEST(SuspendMemory, DataNotYetReceivedSurvives) {
  ScopedEnv env;
  env.set("NCCL_PROTO", "Simple");  // the buffer that suspend releases
  std::vector<ncclComm_t> comms(2, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  constexpr size_t kBytes = 96 << 10;  // fits in the FIFO: the send returns at once
  std::vector<unsigned char> src(kBytes), dst(kBytes, 0);
  fillPattern(src.data(), kBytes, patternKey(1, 0, 1));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // connects the pair
  ncclSend(src.data(), kBytes, ncclUint8, 1, comms[0], nullptr);
  ncclRecv(dst.data(), kBytes, ncclUint8, 0, comms[1], nullptr);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  fillPattern(src.data(), kBytes, patternKey(2, 0, 1));
  ASSERT_EQ(ncclSend(src.data(), kBytes, ncclUint8, 1, comms[0], nullptr), ncclSuccess);
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommSuspend(c, NCCL_SUSPEND_MEM), ncclSuccess);
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommResume(c), ncclSuccess);
  ASSERT_EQ(ncclRecv(dst.data(), kBytes, ncclUint8, 0, comms[1], nullptr), ncclSuccess);
  EXPECT_FALSE(findPatternMismatch(dst.data(), kBytes, patternKey(2, 0, 1)).has_value());
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST(SuspendMemory, ProcessesReleaseSharedMemory) {
  EXPECT_RANKS_OK(runRanks(LaunchMode::kProcesses, 2, [](const RankContext& c) {
    // A second communicator is the barrier: every rank suspends after all have read every
    // step (below), and before any resumes and starts its next call.
    ncclComm_t barrier = nullptr;
    if (ncclCommSplit(c.comm, 0, c.rank, &barrier, nullptr) != ncclSuccess) return RankOutcome::fail("split");
    auto allReach = [barrier] {
      float one = 1, sum = 0;
      return ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, barrier, nullptr) == ncclSuccess;
    };
    std::vector<float> data(kCount);
    for (int round = 0; round < 2; ++round) {
      data.assign(kCount, 1.0f);
      if (ncclAllReduce(data.data(), data.data(), kCount, ncclFloat32, ncclSum, c.comm, nullptr) != ncclSuccess ||
          data[kCount - 1] != 2.0f)
        return RankOutcome::fail("allreduce before suspend");
    }
    // A rank gives back the slots it sends on once its peer has read them: a peer that
    // reached the barrier has returned from its AllReduce, so has read every step.
    if (!allReach()) return RankOutcome::fail("barrier before suspend");
    const long before = statusKiB("RssShmem");
    if (before < 0) return RankOutcome::fail("no RssShmem in /proc/self/status");
    if (ncclCommSuspend(c.comm, NCCL_SUSPEND_MEM) != ncclSuccess) return RankOutcome::fail("suspend");
    const long after = statusKiB("RssShmem");
    if (before - after < kAtLeastKiB)
      return RankOutcome::fail("RssShmem went from " + std::to_string(before) + " to " + std::to_string(after) +
                               " KiB");
    if (!allReach()) return RankOutcome::fail("barrier");
    if (ncclCommResume(c.comm) != ncclSuccess) return RankOutcome::fail("resume");
    data.assign(kCount, 2.0f);
    if (ncclAllReduce(data.data(), data.data(), kCount, ncclFloat32, ncclSum, c.comm, nullptr) != ncclSuccess ||
        data[0] != 4.0f || data[kCount - 1] != 4.0f)
      return RankOutcome::fail("allreduce after resume");
    return ncclCommDestroy(barrier) == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("destroy");
  }));
}

// Suspend is local: a rank may suspend and resume between calls while its peers go on. Its
// peers may then already be writing the next call's steps into the FIFOs it receives on,
// so those must keep their memory (releasing them lost the steps: sums short by a rank's
// share, with every call returning ncclSuccess).
TEST(SuspendMemory, ARankSuspendingAloneLosesNoStepOfItsPeers) {
  for (LaunchMode mode : {LaunchMode::kProcesses, LaunchMode::kThreads}) {
    EXPECT_RANKS_OK(runRanks(mode, 2, [](const RankContext& c) {
      constexpr size_t kValues = 100000;
      std::vector<float> data(kValues);
      for (int round = 1; round <= 150; ++round) {
        if (c.rank == 0) {
          if (ncclCommSuspend(c.comm, NCCL_SUSPEND_MEM) != ncclSuccess) return RankOutcome::fail("suspend");
          if (ncclCommResume(c.comm) != ncclSuccess) return RankOutcome::fail("resume");
        }
        data.assign(kValues, static_cast<float>(round * (c.rank + 1)));
        if (ncclAllReduce(data.data(), data.data(), kValues, ncclFloat32, ncclSum, c.comm, nullptr) != ncclSuccess)
          return RankOutcome::fail("allreduce in round " + std::to_string(round));
        for (size_t i = 0; i < kValues; ++i)
          if (data[i] != static_cast<float>(3 * round))
            return RankOutcome::fail("round " + std::to_string(round) + ": element " + std::to_string(i) + " is " +
                                     std::to_string(data[i]) + ", expected " + std::to_string(3 * round));
      }
      return RankOutcome::pass();
    }));
  }
}

}  // namespace
}  // namespace chorus_test
