// A GPU communicator's kernels have no more lanes (thread blocks) than its GPU runs at once:
// a lane waiting for a peer's lane that is not resident never finishes. The split of a
// group's sends and receives into kernels by rounds (kernel_runs.h), and, with a stand-in
// for the GPU that runs each staged kernel's lanes side by side on the CPU (one kernel after
// the other, per rank), proof that the split finishes where a split by peer would not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/cuda_driver_api.h"
#include "fake_cuda_driver.h"
#include "nccl.h"
#include "running_gpu_stand_in.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/executor/cuda/kernel_runs.h"

namespace chorus {
namespace {

// ---- The split itself ----

Lane laneOf(WorkKind kind, int peer) {
  Lane lane{nullptr, {}};
  WorkItem w{};
  w.kind = kind;
  w.root = peer;
  lane.items.push_back(w);
  return lane;
}

// Every lane of a rank's all-to-all (sends to and receives from every other rank, and the
// copy to itself), in buildLanes' order: sends by peer, receives by peer, the copy.
std::vector<Lane> allToAllLanes(int rank, int nranks) {
  std::vector<Lane> lanes;
  for (WorkKind kind : {WorkKind::Send, WorkKind::Recv})
    for (int p = 0; p < nranks; ++p)
      if (p != rank) lanes.push_back(laneOf(kind, p));
  lanes.push_back(laneOf(WorkKind::LocalCopy, rank));
  return lanes;
}

std::vector<Lane*> pointersTo(std::vector<Lane>& lanes) {
  std::vector<Lane*> out;
  for (Lane& l : lanes) out.push_back(&l);
  return out;
}

int roundOf(const Lane& lane, int rank, int nranks) {
  const WorkItem& w = lane.items.front();
  if (w.kind == WorkKind::Send) return (w.root - rank + nranks) % nranks;
  if (w.kind == WorkKind::Recv) return (rank - w.root + nranks) % nranks;
  return w.kind == WorkKind::LocalCopy ? 0 : -1;
}

TEST(KernelLaneBound, SendsAndReceivesGoInWholeRoundsInOrderWithinTheBound) {
  const int nranks = 8;
  for (int rank : {0, 2, 7}) {
    for (int bound : {2, 3, 4, 5, 14}) {
      std::vector<Lane> lanes = allToAllLanes(rank, nranks);
      std::vector<std::vector<Lane*>> kernels;
      splitLanesIntoKernels(rank, nranks, bound, pointersTo(lanes), &kernels);
      std::set<const Lane*> seen;
      std::map<int, int> kernelOfRound;
      int lastRound = -1;
      for (size_t k = 0; k < kernels.size(); ++k) {
        EXPECT_LE(kernels[k].size(), static_cast<size_t>(bound)) << "rank " << rank << " kernel " << k;
        for (const Lane* l : kernels[k]) {
          EXPECT_TRUE(seen.insert(l).second) << "a lane twice";
          const int round = roundOf(*l, rank, nranks);
          EXPECT_GE(round, lastRound) << "rounds out of order";
          lastRound = round;
          auto [it, added] = kernelOfRound.emplace(round, static_cast<int>(k));
          EXPECT_EQ(it->second, static_cast<int>(k)) << "round " << round << " split across kernels";
        }
      }
      EXPECT_EQ(seen.size(), lanes.size());
      // Packed: no kernel could have taken the next one's first round.
      for (size_t k = 0; k + 1 < kernels.size(); ++k) {
        const int next = roundOf(*kernels[k + 1].front(), rank, nranks);
        const size_t nextLanes = std::count_if(kernels[k + 1].begin(), kernels[k + 1].end(),
                                               [&](const Lane* l) { return roundOf(*l, rank, nranks) == next; });
        EXPECT_GT(kernels[k].size() + nextLanes, static_cast<size_t>(bound));
      }
    }
  }
  // Rank 2 of 8 in kernels of 4: its copy and round 1 (send to 3, receive from 1), then
  // rounds 2-3, 4-5, 6-7.
  std::vector<Lane> lanes = allToAllLanes(2, 8);
  std::vector<std::vector<Lane*>> kernels;
  splitLanesIntoKernels(2, 8, 4, pointersTo(lanes), &kernels);
  ASSERT_EQ(kernels.size(), 4u);
  ASSERT_EQ(kernels[0].size(), 3u);
  EXPECT_EQ(kernels[0][0]->items[0].kind, WorkKind::LocalCopy);
  EXPECT_EQ(kernels[0][1]->items[0].root, 3);
  EXPECT_EQ(kernels[0][2]->items[0].root, 1);
}

TEST(KernelLaneBound, WithinTheBoundOrWithoutOneTheLanesAreOneKernelAsPlanned) {
  std::vector<Lane> lanes = allToAllLanes(1, 4);
  const std::vector<Lane*> planned = pointersTo(lanes);
  for (int bound : {0, 7, 100}) {
    std::vector<std::vector<Lane*>> kernels;
    splitLanesIntoKernels(1, 4, bound, planned, &kernels);
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(kernels[0], planned);
  }
}

TEST(KernelLaneBound, ChannelsGoFirstAndARoundBeyondTheBoundGetsAKernelOfItsOwn) {
  std::vector<Lane> lanes = {laneOf(WorkKind::AllReduce, 0), laneOf(WorkKind::Send, 1), laneOf(WorkKind::Recv, 3),
                             laneOf(WorkKind::AllReduce, 0), laneOf(WorkKind::Send, 2)};
  std::vector<std::vector<Lane*>> kernels;
  splitLanesIntoKernels(0, 4, 1, pointersTo(lanes), &kernels);
  // Channels {0, 3}; round 1 {send to 1, receive from 3}, beyond the bound alone; round 2 {send to 2}.
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0], (std::vector<Lane*>{&lanes[0], &lanes[3]}));
  EXPECT_EQ(kernels[1], (std::vector<Lane*>{&lanes[1], &lanes[2]}));
  EXPECT_EQ(kernels[2], std::vector<Lane*>{&lanes[4]});
}

// ---- The whole path, with a stand-in GPU that runs what it is given ----

constexpr int kGpuLanes = 12;  // the stand-in GPU runs 12 blocks at once

const GpuLaunchHooks kRunningStandIn = {
    [](std::string*) { return true; },
    fixtures::keepKernel,
    nullptr,
    [](int) { return kGpuLanes; },
};

class GpuKernelBoundTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 4;
  static constexpr size_t kCount = 40;  // floats per peer: 160 bytes, more than a FIFO holds

  void SetUp() override {
    setenv(kCudaDriverLibraryEnv, fixtures::kFakeDriver, 1);  // before the first Chorus call
    setGpuLaunchHooksForTesting(&kRunningStandIn);
    fixtures::gKernels.clear();
    // Point-to-point FIFOs of two 64-byte Simple slots: a send of 160 bytes waits for its
    // receiver to drain them.
    setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
    setenv("NCCL_STEPS", "2", 1);
    setenv("CHORUS_P2P_BUFFSIZE", "128", 1);
    setenv("NCCL_PROTO", "Simple", 1);
    comms_.assign(kRanks, nullptr);
    std::vector<int> devs(kRanks, fixtures::kFakeDeviceOrdinal);
    ASSERT_EQ(ncclCommInitAll(comms_.data(), kRanks, devs.data()), ncclSuccess);
    device_ = reinterpret_cast<float*>(fixtures::fakeDriver().deviceMemory);  // 4096 floats
  }
  void TearDown() override {
    for (ncclComm_t c : comms_) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
    setGpuLaunchHooksForTesting(nullptr);
    for (const char* name : {"CHORUS_ALLOW_SHARED_GPU", "NCCL_STEPS", "CHORUS_P2P_BUFFSIZE", "NCCL_PROTO"})
      unsetenv(name);
  }
  float* sendOf(int r) { return device_ + r * 2 * kRanks * kCount; }
  float* recvOf(int r) { return sendOf(r) + kRanks * kCount; }

  // Every rank sends block p of its buffer to rank p and receives rank p's into block p.
  void allToAll() {
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kRanks * kCount; ++i) {
        sendOf(r)[i] = static_cast<float>(1000 * r + i);
        recvOf(r)[i] = -1;
      }
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      for (int p = 0; p < kRanks; ++p) {
        ASSERT_EQ(ncclSend(sendOf(r) + p * kCount, kCount, ncclFloat32, p, comms_[r], nullptr), ncclSuccess);
        ASSERT_EQ(ncclRecv(recvOf(r) + p * kCount, kCount, ncclFloat32, p, comms_[r], nullptr), ncclSuccess);
      }
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  }

  std::vector<ncclResult_t> runEveryRank(double timeoutSec) {
    std::vector<ncclResult_t> results(kRanks, ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] { results[r] = fixtures::runKernels(comms_[r], fixtures::gKernels[r], timeoutSec); });
    for (std::thread& t : threads) t.join();
    return results;
  }

  std::vector<ncclComm_t> comms_;
  float* device_ = nullptr;
};

TEST_F(GpuKernelBoundTest, RanksSharingAGpuSplitItsBlocksAndTheirKernelsStayWithinThem) {
  // 12 blocks among 4 ranks on the one GPU: 3 per kernel, and no more channels.
  for (ncclComm_t c : comms_) {
    EXPECT_EQ(c->kernelLanes, kGpuLanes / kRanks);
    EXPECT_LE(static_cast<int>(c->channels.size()), kGpuLanes / kRanks);
  }
  allToAll();
  for (int r = 0; r < kRanks; ++r) {
    // Its copy and round 1, then round 2, then round 3.
    ASSERT_EQ(fixtures::gKernels[r].size(), 3u) << "rank " << r;
    for (const std::vector<Lane>& kernel : fixtures::gKernels[r]) EXPECT_LE(kernel.size(), 3u);
  }
  const std::vector<ncclResult_t> results = runEveryRank(20);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r], ncclSuccess) << "rank " << r;
    for (int p = 0; p < kRanks; ++p)
      for (size_t i = 0; i < kCount; ++i)
        ASSERT_EQ(recvOf(r)[p * kCount + i], static_cast<float>(1000 * p + r * kCount + i)) << r << " from " << p;
  }
}

// The control: the same lanes cut by peer instead (every rank's sends first) hang on the
// full FIFOs; the wait ends at the timeout. Without it the test above could not fail.
TEST_F(GpuKernelBoundTest, TheSameLanesCutByPeerWouldWaitForever) {
  allToAll();
  for (auto& [rank, kernels] : fixtures::gKernels) {
    std::vector<Lane> all;
    for (const std::vector<Lane>& k : kernels) all.insert(all.end(), k.begin(), k.end());
    std::stable_sort(all.begin(), all.end(), [](const Lane& a, const Lane& b) {
      return (a.items[0].kind == WorkKind::Send) > (b.items[0].kind == WorkKind::Send);
    });
    kernels.clear();
    for (size_t i = 0; i < all.size(); i += 3)
      kernels.emplace_back(all.begin() + i, all.begin() + std::min(all.size(), i + 3));
  }
  const std::vector<ncclResult_t> results = runEveryRank(1);
  EXPECT_TRUE(std::any_of(results.begin(), results.end(), [](ncclResult_t r) { return r != ncclSuccess; }));
  for (ncclComm_t c : comms_) ncclCommAbort(c);
  comms_.clear();
}

}  // namespace
}  // namespace chorus
