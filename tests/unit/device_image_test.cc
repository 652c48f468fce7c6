// The CUDA executor's inputs, checked without a GPU: communicators built by the host
// runtime (ncclCommInitAll, in-process P2P connections) are laid out as device images
// (src/enqueue/device_image.h) at an address other than where they were built, and the
// kernel's body (programs::runLaneAsTeam) runs them with teams of host threads. Results must
// be right, and only the image's copies of the FifoEnds may move: the host's stay put.
// Also: which calls share a kernel launch (gpu_enqueue.h), and the shared-GPU check.
#include "src/executor/cuda/device_image.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "device/common/lane_program.h"
#include "nccl.h"
#include "src/enqueue/plan.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/executor/cuda/kernel_runs.h"
#include "team_exec.h"
#include "work_item_fixture.h"

namespace chorus {
namespace {

using fixtures::rankInput;
using fixtures::TeamExec;
using fixtures::TeamState;

constexpr int kTeamSize = 4;
constexpr int kRanks = 3;

// Sets NCCL_PROTO and NCCL_ALGO for the communicators made while it lives.
class TuningEnv {
 public:
  TuningEnv(const char* proto, const char* algo) {
    setenv("NCCL_PROTO", proto, 1);
    setenv("NCCL_ALGO", algo, 1);
  }
  ~TuningEnv() {
    unsetenv("NCCL_PROTO");
    unsetenv("NCCL_ALGO");
  }
};

class Comms {
 public:
  Comms() {
    comms_.resize(kRanks);
    ok_ = ncclCommInitAll(comms_.data(), kRanks, nullptr) == ncclSuccess;
  }
  ~Comms() {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
  }
  bool ok() const { return ok_; }
  ncclComm* operator[](int r) const { return comms_[r]; }

 private:
  std::vector<ncclComm_t> comms_;
  bool ok_ = false;
};

// Memory standing in for the GPU's: the image is copied here and used only from here.
struct Placed {
  std::unique_ptr<std::byte[]> memory;
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(memory.get()); }
};

FifoAddressMap identity() {
  return [](void* host) { return host; };
}

Placed placeCommImage(const ncclComm& comm, CommImage* image) {
  CommImage sizing;
  EXPECT_EQ(buildCommImage(comm, 0, identity(), &sizing), ncclSuccess);
  Placed placed{std::make_unique<std::byte[]>(sizing.bytes.size())};
  EXPECT_EQ(buildCommImage(comm, placed.base(), identity(), image), ncclSuccess);
  std::copy(image->bytes.begin(), image->bytes.end(), placed.memory.get());
  return placed;
}

Placed placeLaunchImage(const std::vector<Lane*>& lanes, LaunchImage* image) {
  Placed placed{std::make_unique<std::byte[]>(launchImageBytes(lanes))};
  buildLaunchImage(lanes, placed.base(), image);
  std::copy(image->bytes.begin(), image->bytes.end(), placed.memory.get());
  return placed;
}

// Every lane of every rank run by its own team, all at once, as the ranks' kernels would.
void runTeams(const std::vector<CommView>& views, const std::vector<LaunchImage>& launches,
              std::vector<ExecContext>& contexts) {
  std::vector<std::unique_ptr<TeamState>> teams;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < views.size(); ++r) {
    for (int l = 0; l < launches[r].nLanes; ++l) {
      teams.push_back(std::make_unique<TeamState>(kTeamSize));
      TeamState* team = teams.back().get();
      const KernelLane lane = launches[r].lanes[l];
      for (int t = 0; t < kTeamSize; ++t) {
        threads.emplace_back([&, r, lane, team, t] {
          TeamExec exec(contexts[r], *team, t, kTeamSize);
          programs::runLaneAsTeam<int32_t, RedOp<int32_t, RedKind::Sum>>(exec, views[r], lane.items, lane.nItems);
        });
      }
    }
  }
  for (auto& th : threads) th.join();
}

struct Tuning {
  const char* proto;
  const char* algo;
};
class DeviceImageRunTest : public ::testing::TestWithParam<Tuning> {};

TEST_P(DeviceImageRunTest, RelocatedImagesRunAllReduceAndReduceScatter) {
  TuningEnv env(GetParam().proto, GetParam().algo);
  Comms comms;
  ASSERT_TRUE(comms.ok());
  const size_t count = 4099 * kRanks;  // AllReduce count; ReduceScatter's block is count / kRanks
  std::vector<std::vector<int32_t>> send(kRanks, std::vector<int32_t>(count)), ar(kRanks), rs(kRanks);
  std::vector<CommImage> commImages(kRanks);
  std::vector<LaunchImage> launches(kRanks);
  std::vector<Placed> placed;
  std::vector<CommView> views;
  std::vector<ExecContext> contexts(kRanks);
  std::atomic<uint32_t> noAbort{0};
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < count; ++i) send[r][i] = rankInput(r, i);
    ar[r].assign(count, -1);
    rs[r].assign(count / kRanks, -1);
    std::vector<CollOp> ops = {
        CollOp{WorkKind::AllReduce, send[r].data(), ar[r].data(), count, ncclInt32, ncclSum, 0},
        CollOp{WorkKind::ReduceScatter, send[r].data(), rs[r].data(), count / kRanks, ncclInt32, ncclSum, 0}};
    std::vector<Lane*> lanes;
    ASSERT_EQ(buildLanes(comms[r], ops, &lanes), ncclSuccess);
    ASSERT_FALSE(lanes.empty());
    placed.push_back(placeCommImage(*comms[r], &commImages[r]));
    placed.push_back(placeLaunchImage(lanes, &launches[r]));
    views.push_back(commImages[r].view);
    contexts[r].abortFlag = &noAbort;
    contexts[r].rank = r;
    contexts[r].timeoutSec = 60;
  }
  runTeams(views, launches, contexts);

  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(contexts[r].result.load(), ncclSuccess) << "rank " << r;
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int q = 0; q < kRanks; ++q) want += rankInput(q, i);
      ASSERT_EQ(ar[r][i], want) << "AllReduce rank " << r << " element " << i;
    }
    const size_t block = count / kRanks;
    for (size_t i = 0; i < block; ++i) {
      int32_t want = 0;
      for (int q = 0; q < kRanks; ++q) want += rankInput(q, r * block + i);
      ASSERT_EQ(rs[r][i], want) << "ReduceScatter rank " << r << " element " << i;
    }
    // The image's ends moved; the host's own did not (the GPU keeps the counters).
    const ChannelView& hostRing = comms[r]->channelViews[0];
    EXPECT_EQ(hostRing.ringSend->step, 0u) << "rank " << r;
    EXPECT_GT(views[r].channels[0].ringSend->step, 0u) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, DeviceImageRunTest,
                         ::testing::Values(Tuning{"Simple", "Ring"}, Tuning{"LL", "Ring"}, Tuning{"LL128", "Ring"},
                                           Tuning{"Simple", "Tree"}, Tuning{"LL", "Tree"}, Tuning{"LL128", "Tree"}),
                         [](const auto& info) { return std::string(info.param.proto) + info.param.algo; });

TEST(DeviceImageTest, EveryEndIsMappedAndAnUnreachableOneIsAnError) {
  Comms comms;
  ASSERT_TRUE(comms.ok());
  std::vector<void*> asked;
  CommImage image;
  ASSERT_EQ(buildCommImage(
                *comms[0], 0x1000,
                [&](void* host) {
                  asked.push_back(host);
                  return host;
                },
                &image),
            ncclSuccess);
  // Each connection the channels use, at its control block.
  for (const ChannelView& v : comms[0]->channelViews) {
    for (const FifoEnd* e : {v.ringSend, v.ringRecv})
      EXPECT_NE(std::find(asked.begin(), asked.end(), e->ctrl), asked.end());
  }
  // The image's pointers lie inside it, at the base it was built for.
  const uintptr_t base = 0x1000, top = base + image.bytes.size();
  const uintptr_t channels = reinterpret_cast<uintptr_t>(image.view.channels);
  EXPECT_GE(channels, base);
  EXPECT_LT(channels, top);

  ::testing::internal::CaptureStderr();
  setenv("NCCL_DEBUG", "WARN", 1);
  EXPECT_EQ(buildCommImage(
                *comms[0], 0x1000, [](void*) -> void* { return nullptr; }, &image),
            ncclInternalError);
  unsetenv("NCCL_DEBUG");
  ::testing::internal::GetCapturedStderr();
}

TEST(DeviceImageTest, ConnectingAPeerChangesOnlyItsSlotsAndTableEntries) {
  Comms comms;
  ASSERT_TRUE(comms.ok());
  CommImage before, after;
  const uintptr_t base = 0x10000;
  ASSERT_EQ(buildCommImage(*comms[0], base, identity(), &before), ncclSuccess);
  // A send from rank 0 to rank 1 connects that pair's p2p connections.
  std::vector<char> a(64, 1), b(64, 0);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a.data(), a.size(), ncclChar, 1, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(b.data(), b.size(), ncclChar, 0, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(b, a);
  ASSERT_EQ(buildCommImage(*comms[0], base, identity(), &after), ncclSuccess);
  ASSERT_EQ(after.bytes.size(), before.bytes.size());

  // Where peer 1's slots and table entries are: nothing else may change.
  std::vector<std::pair<size_t, size_t>> allowed;
  for (FifoEnd* const* table : {after.view.p2pSend, after.view.p2pRecv}) {
    const size_t tableAt = reinterpret_cast<uintptr_t>(table) - base;
    FifoEnd* slot = nullptr;
    std::memcpy(&slot, after.bytes.data() + tableAt + sizeof(FifoEnd*) * 1, sizeof(slot));
    allowed.emplace_back(tableAt + sizeof(FifoEnd*), tableAt + 2 * sizeof(FifoEnd*));
    if (slot != nullptr) {
      const size_t slotAt = reinterpret_cast<uintptr_t>(slot) - base;
      allowed.emplace_back(slotAt, slotAt + sizeof(FifoEnd));
    }
  }
  ASSERT_GE(allowed.size(), 3u) << "peer 1's send end is in the table";
  const auto ranges = changedRanges(before.bytes, after.bytes);
  ASSERT_FALSE(ranges.empty());
  for (const auto& range : ranges) {
    bool inside = false;
    for (const auto& [begin, end] : allowed) inside = inside || (range.first >= begin && range.second <= end);
    EXPECT_TRUE(inside) << "bytes [" << range.first << ", " << range.second << ") changed outside peer 1's entries";
  }
}

TEST(KernelRunsTest, CollectivesSplitByTypeAndOpClassSendsAndReceivesLast) {
  Comms comms;
  ASSERT_TRUE(comms.ok());
  int x = 0;
  const std::vector<CollOp> ops = {
      CollOp{WorkKind::Send, &x, nullptr, 10, ncclFloat32, ncclSum, 1},
      CollOp{WorkKind::AllReduce, &x, &x, 10, ncclFloat32, ncclSum, 0},
      CollOp{WorkKind::AllReduce, &x, &x, 10, ncclFloat32, ncclSum, 0},
      CollOp{WorkKind::AllReduce, &x, &x, 10, ncclFloat32, ncclMax, 0},
      CollOp{WorkKind::AllGather, &x, &x, 10, ncclFloat32, ncclSum, 0},
      CollOp{WorkKind::Broadcast, &x, &x, 3, ncclInt64, ncclProd, 0},
      CollOp{WorkKind::Recv, nullptr, &x, 5, ncclInt32, ncclSum, 2},
  };
  std::vector<KernelRun> runs;
  ASSERT_EQ(splitIntoKernelRuns(comms[0], ops, &runs), ncclSuccess);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].dtype, ncclFloat32);  // the two float sums
  EXPECT_EQ(runs[0].kind, RedKind::Sum);
  EXPECT_EQ(runs[0].ops.size(), 2u);
  EXPECT_EQ(runs[1].kind, RedKind::Max);  // the run-time-op kernel
  EXPECT_EQ(runs[1].ops.size(), 1u);
  EXPECT_EQ(runs[2].dtype, ncclUint8);  // AllGather and Broadcast as bytes
  ASSERT_EQ(runs[2].ops.size(), 2u);
  EXPECT_EQ(runs[2].ops[0].count, 40u);
  EXPECT_EQ(runs[2].ops[1].count, 24u);
  EXPECT_EQ(runs[3].dtype, ncclUint8);  // the send and the receive, last, as bytes
  ASSERT_EQ(runs[3].ops.size(), 2u);
  EXPECT_EQ(runs[3].ops[0].kind, WorkKind::Send);
  EXPECT_EQ(runs[3].ops[0].count, 40u);
  EXPECT_EQ(runs[3].ops[1].count, 20u);
}

TEST(SharedGpuTest, FindsARankOfTheSameHostOnTheSameGpu) {
  ncclComm comm;
  comm.rank = 1;
  comm.nranks = 3;
  auto peer = [](int rank, int dev, uint64_t host) {
    PeerInfo p{};
    p.rank = rank;
    p.cudaDev = dev;
    p.hostHash = host;
    p.gpuComm = 1;
    return p;
  };
  comm.peers = {peer(0, 0, 7), peer(1, 1, 7), peer(2, 1, 8)};
  EXPECT_EQ(sharedGpuPeer(comm), -1) << "rank 2 uses device 1 of another host";
  comm.peers[0].cudaDev = 1;
  EXPECT_EQ(sharedGpuPeer(comm), 0);
  EXPECT_EQ(checkGpusNotShared(comm), ncclInvalidUsage);
  comm.peers[0].gpuComm = 0;
  EXPECT_EQ(sharedGpuPeer(comm), -1) << "rank 0 is a CPU communicator";
  EXPECT_EQ(checkGpusNotShared(comm), ncclSuccess);
  comm.peers[0].gpuComm = 1;

  // Where the PCI locations are known they decide: with CUDA_VISIBLE_DEVICES every
  // process may call its own GPU device 0.
  comm.peers[0].gpuBusId = 0x1b01;
  comm.peers[1].gpuBusId = 0x2c01;
  EXPECT_EQ(sharedGpuPeer(comm), -1) << "same device number, different GPUs";
  comm.peers[0].cudaDev = 0;
  comm.peers[0].gpuBusId = 0x2c01;
  EXPECT_EQ(sharedGpuPeer(comm), 0) << "different device numbers, one GPU";
}

}  // namespace
}  // namespace chorus
