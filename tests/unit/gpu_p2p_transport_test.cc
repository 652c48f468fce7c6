// The P2P transport between GPU communicators of one process, without a GPU: a stand-in
// for the CUDA backend's GPU memory (GpuFifoMemory) hands out host memory and remembers
// which "GPU" holds each block, and the launches are recorded instead of run. Checks where
// each connection's buffers live (the receiver's GPU when the GPUs are within
// NCCL_P2P_LEVEL and can reach each other, else host memory), that the sender's GPU was
// given access to them, and that nothing is left allocated or mapped after destroy or a
// failed init. Across processes (SHM, CUDA IPC): shm_gpu_buffers_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_driver_api.h"
#include "core/path_type.h"
#include "fake_cuda_driver.h"
#include "nccl.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/topo/topo_system.h"
#include "src/topo/topo_xml.h"
#include "stand_in_gpu_memory.h"
#include "warnings_during.h"

namespace chorus {
namespace {

using fixtures::StandInGpuMemory;

StandInGpuMemory* gMemory = nullptr;
int gArchOfDevice[8];  // each stand-in GPU's compute capability (major * 10 + minor)

const GpuLaunchHooks kStandIn = {
    [](std::string*) { return true; },
    [](ncclComm*, const std::vector<Lane*>&, ncclDataType_t, RedKind, const std::vector<cudaStream_t>&) {
      return ncclSuccess;
    },
    nullptr,  // set in SetUp
    nullptr,  // no bound on a kernel's lanes
    [](int device) { return device >= 0 && device < 8 ? gArchOfDevice[device] : 0; },
};

class GpuP2pTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv(kCudaDriverLibraryEnv, fixtures::kFakeDriver, 1);  // before the first Chorus call
    memory_ = std::make_unique<StandInGpuMemory>();
    gMemory = memory_.get();
    std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 90);  // Hopper, as the DGX H100's
    hooks_ = kStandIn;
    hooks_.fifoMemory = memory_.get();
    setGpuLaunchHooksForTesting(&hooks_);
  }
  void TearDown() override {
    destroyAll();
    EXPECT_EQ(memory_->live(), 0u) << "GPU memory left allocated";
    EXPECT_EQ(memory_->imported(), 0u) << "GPU memory left mapped";
    EXPECT_EQ(memory_->badReleases(), 0) << "a release of memory the stand-in did not give, or on another GPU";
    setGpuLaunchHooksForTesting(nullptr);
    for (const char* name :
         {"NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "CHORUS_ALLOW_SHARED_GPU", "NCCL_PROTO", "NCCL_P2P_READ_ENABLE"})
      unsetenv(name);
    gMemory = nullptr;
  }
  // Rank r on CUDA device devs[r] of the host described by tests/topo/`file`, small buffers.
  ncclResult_t initOn(const char* file, const std::vector<int>& devs) {
    const std::string path = std::string(CHORUS_TOPO_TEST_DIR "/") + file;
    setenv("NCCL_TOPO_FILE", path.c_str(), 1);
    setenv("NCCL_BUFFSIZE", "65536", 1);
    setenv("NCCL_LL_BUFFSIZE", "16384", 1);
    setenv("NCCL_LL128_BUFFSIZE", "65536", 1);
    comms_.assign(devs.size(), nullptr);
    devs_ = devs;
    const ncclResult_t made = ncclCommInitAll(comms_.data(), static_cast<int>(devs.size()), devs.data());
    for (const char* name : {"NCCL_TOPO_FILE", "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE"})
      unsetenv(name);
    if (made != ncclSuccess) comms_.clear();
    return made;
  }
  void destroyAll() {
    for (ncclComm_t c : comms_) {
      if (c) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
    comms_.clear();
  }
  // Calls `check(rank, peer, connection, sending)` for every channel connection.
  template <typename Check>
  void forEachChannelConnection(Check check) {
    for (size_t r = 0; r < comms_.size(); ++r)
      for (const Channel& ch : comms_[r]->channels)
        for (int peer = 0; peer < comms_[r]->nranks; ++peer) {
          if (ch.send[peer].connected()) check(static_cast<int>(r), peer, ch.send[peer], true);
          if (ch.recv[peer].connected()) check(static_cast<int>(r), peer, ch.recv[peer], false);
        }
  }
  // Every connection's buffers are in the receiver's GPU memory, its control block in host
  // memory, and the sender's GPU may write there; with `p2pRead`, the Simple slots are in
  // the sender's GPU memory, which the receiver's GPU may read.
  void expectBuffersOnReceiversGpu(bool p2pRead = false) {
    int seen = 0;
    forEachChannelConnection([&](int r, int peer, const Connection& c, bool sending) {
      ++seen;
      const int receiverDev = sending ? devs_[peer] : devs_[r];
      const int senderDev = sending ? devs_[r] : devs_[peer];
      EXPECT_STREQ(c.transport->name(), "P2P");
      EXPECT_TRUE(c.end.gpuBuffers) << "rank " << r << " peer " << peer;
      EXPECT_TRUE(c.end.direct) << "the sender's GPU may write the receiver's buffers: Send/Recv in place";
      for (int p = 0; p < kNumProtocols; ++p) {
        const bool onSender = p2pRead && p == static_cast<int>(Protocol::Simple);
        EXPECT_EQ(gMemory->deviceOf(c.end.buffs[p]), onSender ? senderDev : receiverDev)
            << "rank " << r << " peer " << peer << " proto " << p;
      }
      EXPECT_EQ(gMemory->deviceOf(c.end.ctrl), -1) << "the control block stays in host memory";
      const std::string on = "GPU memory of CUDA device " + std::to_string(receiverDev);
      EXPECT_EQ(c.resource->describe(),
                p2pRead ? on + ", Simple slots of CUDA device " + std::to_string(senderDev) + " (P2P read)" : on);
      if (sending) {
        EXPECT_TRUE(gMemory->accessEnabled(devs_[r], devs_[peer])) << "rank " << r << " -> " << peer;
      }
      if (p2pRead && !sending) {
        EXPECT_TRUE(gMemory->accessEnabled(devs_[r], devs_[peer])) << "rank " << r << " reads " << peer;
      }
    });
    EXPECT_GT(seen, 0);
  }
  // Each rank's ncclCommMemStats is the GPU memory on its GPU.
  void expectMemStatsPerGpu() {
    for (size_t r = 0; r < comms_.size(); ++r) {
      uint64_t total = 0;
      ASSERT_EQ(ncclCommMemStats(comms_[r], ncclStatGpuMemTotal, &total), ncclSuccess);
      EXPECT_EQ(total, memory_->bytesOn(devs_[r])) << "rank " << r;
      EXPECT_GT(total, 0u);
    }
  }
  void expectBuffersInHostMemory() {
    int seen = 0;
    forEachChannelConnection([&](int r, int peer, const Connection& c, bool) {
      ++seen;
      EXPECT_FALSE(c.end.gpuBuffers) << "rank " << r << " peer " << peer;
      EXPECT_FALSE(c.end.direct) << "no peer access: nothing written in place";
      EXPECT_EQ(gMemory->deviceOf(c.end.buffs[static_cast<int>(Protocol::Simple)]), -1);
    });
    EXPECT_GT(seen, 0);
  }

  std::unique_ptr<StandInGpuMemory> memory_;
  GpuLaunchHooks hooks_{};
  std::vector<ncclComm_t> comms_;
  std::vector<int> devs_;
};

// A DGX H100: every pair of GPUs is NVLink (through NVSwitch), so every connection is P2P
// in the receiver's GPU memory, as NCCL's P2P write.
TEST_F(GpuP2pTransportTest, OnNvlinkEveryConnectionIsInTheReceiversGpuMemory) {
  ASSERT_EQ(initOn("dgx_h100.xml", {3, 0, 6, 1, 7, 2, 5, 4}), ncclSuccess);
  for (size_t r = 0; r < comms_.size(); ++r)
    for (int peer = 0; peer < 8; ++peer)
      EXPECT_EQ(comms_[r]->gpuLinks[peer].gpuPath,
                static_cast<int>(peer == static_cast<int>(r) ? PathType::LOC : PathType::NVL));
  expectBuffersOnReceiversGpu();
  EXPECT_GT(memory_->allocations(), 0);
  expectMemStatsPerGpu();  // its receive buffers are its GPU memory

  // Each rank's network connections would leave through the NIC nearest its GPU.
  topo::XmlNode xml;
  ASSERT_EQ(topo::loadXmlFile(CHORUS_TOPO_TEST_DIR "/dgx_h100.xml", &xml), ncclSuccess);
  topo::TopoSystem system;
  std::string error;
  ASSERT_EQ(topo::TopoSystem::fromXml(xml, &system, &error), ncclSuccess) << error;
  for (size_t r = 0; r < comms_.size(); ++r) {
    for (int gpu : system.gpus()) {
      if (system.node(gpu).gpuDev != devs_[r]) continue;
      const int nic = system.nearestNic(gpu);
      ASSERT_GE(nic, 0);
      ASSERT_FALSE(comms_[r]->nearNics.empty());
      EXPECT_EQ(comms_[r]->nearNics.front(), system.node(nic).netNames.front()) << "rank " << r;
    }
    EXPECT_EQ(comms_[r]->gpuLinks[0].nearNics, &comms_[r]->nearNics);
  }

  // Send/receive connections, made on first use, too.
  auto* buf = reinterpret_cast<float*>(fixtures::fakeDriver().managedMemory);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(buf, 16, ncclFloat32, 1, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(buf + 16, 16, ncclFloat32, 0, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  const Connection& send = comms_[0]->p2pSend[1];
  ASSERT_TRUE(send.connected());
  EXPECT_TRUE(send.end.gpuBuffers);
  EXPECT_EQ(gMemory->deviceOf(send.end.buffs[static_cast<int>(Protocol::Simple)]), devs_[1]);

  destroyAll();
  EXPECT_EQ(memory_->live(), 0u) << "destroy gives every FIFO's GPU memory back";
}

// NCCL's P2P read: between NVLink Ampere GPUs (compute capability 8.0) the Simple slots are
// the sender's GPU memory, which the receiver's kernels read; Hopper writes (as NCCL);
// NCCL_P2P_READ_ENABLE decides either way; never over PCIe by default.
TEST_F(GpuP2pTransportTest, P2pReadPutsTheSimpleSlotsOnTheSendersGpu) {
  std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 80);
  ASSERT_EQ(initOn("dgx_h100.xml", {3, 0, 6, 1}), ncclSuccess);
  expectBuffersOnReceiversGpu(true);
  expectMemStatsPerGpu();  // its receive buffers but Simple's, and the Simple slots of its sends
  destroyAll();
  EXPECT_EQ(memory_->live(), 0u);

  setenv("NCCL_P2P_READ_ENABLE", "0", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {3, 0, 6, 1}), ncclSuccess);
  expectBuffersOnReceiversGpu(false);
  destroyAll();

  std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 90);
  unsetenv("NCCL_P2P_READ_ENABLE");
  ASSERT_EQ(initOn("dgx_h100.xml", {3, 0}), ncclSuccess);
  expectBuffersOnReceiversGpu(false);  // Hopper: P2P write
  destroyAll();
  setenv("NCCL_P2P_READ_ENABLE", "1", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {3, 0}), ncclSuccess);
  expectBuffersOnReceiversGpu(true);
  destroyAll();
  unsetenv("NCCL_P2P_READ_ENABLE");

  std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 80);
  setenv("NCCL_P2P_LEVEL", "PHB", 1);
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersOnReceiversGpu(false);  // PCIe: write
}

// NCCL_P2P_LEVEL bounds the path: LOC keeps even NVLink pairs in host memory; NVL allows them.
TEST_F(GpuP2pTransportTest, TheP2pLevelBoundsWhichPairsUseGpuMemory) {
  setenv("NCCL_P2P_LEVEL", "LOC", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersInHostMemory();
  EXPECT_EQ(memory_->allocations(), 0);
  destroyAll();

  setenv("NCCL_P2P_LEVEL", "NVL", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersOnReceiversGpu();
}

// A PCIe workstation: its GPUs meet at the CPU (PHB), past the default level (PXB, as
// NCCL's on Intel and ARM hosts), so host memory unless NCCL_P2P_LEVEL reaches PHB.
TEST_F(GpuP2pTransportTest, GpusMeetingAtTheCpuUseHostMemoryUnlessTheLevelAllowsIt) {
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  EXPECT_EQ(comms_[0]->gpuLinks[1].gpuPath, static_cast<int>(PathType::PHB));
  expectBuffersInHostMemory();
  destroyAll();

  setenv("NCCL_P2P_LEVEL", "PHB", 1);
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersOnReceiversGpu();
  destroyAll();

  setenv("NCCL_P2P_LEVEL", "4", 1);  // the older numeric form: SYS
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersOnReceiversGpu();
  destroyAll();

  setenv("NCCL_P2P_LEVEL", "FAR", 1);  // not a level: a WARN, and the default
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersInHostMemory();
}

// GPUs that cannot reach each other fall back to host memory; NCCL_P2P_DISABLE leaves P2P
// altogether (shared memory).
TEST_F(GpuP2pTransportTest, WithoutPeerAccessOrWithP2pDisabledTheFifoStaysInHostMemory) {
  memory_->peerAccess = false;
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1}), ncclSuccess);
  expectBuffersInHostMemory();
  destroyAll();

  memory_->peerAccess = true;
  setenv("NCCL_P2P_DISABLE", "1", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1}), ncclSuccess);
  forEachChannelConnection([](int, int, const Connection& c, bool) { EXPECT_STREQ(c.transport->name(), "SHM"); });
  expectBuffersInHostMemory();
}

// Two ranks on one GPU (allowed by the switch): the same device's memory, no peer access.
TEST_F(GpuP2pTransportTest, RanksSharingAGpuUseItsMemory) {
  setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {5, 5}), ncclSuccess);
  EXPECT_EQ(comms_[0]->gpuLinks[1].gpuPath, static_cast<int>(PathType::LOC));
  expectBuffersOnReceiversGpu();
}

// LL128 moves a GPU's lines a warp's 128-byte store at a time (ll128_primitives.h), trusting
// each line to arrive whole: as NCCL, only where every FIFO between the GPUs is in GPU
// memory over NVLink, on GPUs of one compute capability NCCL runs it on. Elsewhere no rank's
// tuner picks it, and an NCCL_PROTO that asks for it gets a WARN naming why.
TEST_F(GpuP2pTransportTest, Ll128OnlyWhereEveryLineArrivesWhole) {
  auto ll128Candidate = [&] {
    int on = 0;
    for (ncclComm_t c : comms_) on += c->tuner->protoEnabled(Protocol::LL128);
    EXPECT_TRUE(on == 0 || on == static_cast<int>(comms_.size())) << "the ranks disagree: " << on;
    return on > 0;
  };
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  EXPECT_TRUE(ll128Candidate()) << "NVLink, GPU memory, Hopper";
  EXPECT_EQ(comms_[0]->tuner->choose(CollKind::AllReduce, 4 << 20).proto, Protocol::LL128)
      << "NCCL's Hopper figures make LL128 the choice at 4 MiB";
  destroyAll();

  gArchOfDevice[2] = 80;
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  EXPECT_FALSE(ll128Candidate()) << "GPUs of two compute capabilities";
  destroyAll();
  std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 86);
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  EXPECT_FALSE(ll128Candidate()) << "8.6: not a compute capability NCCL runs LL128 on";
  destroyAll();
  std::fill(std::begin(gArchOfDevice), std::end(gArchOfDevice), 90);

  setenv("NCCL_P2P_LEVEL", "LOC", 1);
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersInHostMemory();
  EXPECT_FALSE(ll128Candidate()) << "NVLink, but the FIFOs are in host memory";
  destroyAll();

  setenv("NCCL_P2P_LEVEL", "PHB", 1);
  ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  expectBuffersOnReceiversGpu();
  EXPECT_FALSE(ll128Candidate()) << "GPU memory, but over PCIe";
  destroyAll();
  unsetenv("NCCL_P2P_LEVEL");

  setenv("NCCL_PROTO", "LL128", 1);
  const std::vector<std::string> warned = fixtures::warningsDuring([&] {
    ASSERT_EQ(initOn("pcie_4gpu_workstation.xml", {0, 1, 2, 3}), ncclSuccess);
  });
  EXPECT_TRUE(fixtures::anyMentions(warned, "NCCL_PROTO=LL128: LL128 is not used on this communicator"))
      << ::testing::PrintToString(warned);
  EXPECT_TRUE(fixtures::anyMentions(warned, "using Simple"));
  EXPECT_FALSE(ll128Candidate());
  EXPECT_EQ(comms_[0]->tuner->choose(CollKind::AllReduce, 4 << 20).proto, Protocol::Simple);
}

// ncclMemAlloc on a GPU gives memory another process can map, as NCCL's (a cuMem allocation
// exported by file descriptor, here the stand-in's), on the current device; ncclMemFree
// gives it back; a failed allocation is a CUDA error with a WARN.
TEST_F(GpuP2pTransportTest, MemAllocGivesGpuMemoryOtherProcessesCanMap) {
  memory_->byFd = true;
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 5000), ncclSuccess);
  EXPECT_EQ(gMemory->deviceOf(p), 0) << "the current CUDA device's memory";
  EXPECT_TRUE(gMemory->sharedByFdBlock(p));
  size_t bytes = 0;
  std::string why;
  const int fd = gMemory->exportFd(p, &bytes, &why);
  ASSERT_GE(fd, 0) << why;
  EXPECT_GE(bytes, 5000u);
  void* mapped = gMemory->importFd(1, fd, bytes, &why);
  close(fd);
  ASSERT_NE(mapped, nullptr) << why;
  gMemory->closeImported(1, mapped);

  // Registered with a communicator of its GPU, a receive into it may be written in place
  // (BufferRegistration::offerable); other memory, or with a communicator of another GPU, not.
  ASSERT_EQ(initOn("dgx_h100.xml", {1, 0}), ncclSuccess);  // rank 1 on device 0, where p is
  void* handles[3] = {};
  ASSERT_EQ(ncclCommRegister(comms_[1], p, 5000, &handles[0]), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(comms_[0], p, 5000, &handles[1]), ncclSuccess);
  void* managed = fixtures::fakeDriver().managedMemory;
  ASSERT_EQ(ncclCommRegister(comms_[1], managed, 64, &handles[2]), ncclSuccess);
  ASSERT_EQ(comms_[1]->registrations.size(), 2u);
  EXPECT_TRUE(comms_[1]->registrations[0].offerable) << "ncclMemAlloc's, on the communicator's GPU";
  EXPECT_FALSE(comms_[1]->registrations[1].offerable) << "not ncclMemAlloc's: maybe not mapped for the peer's GPU";
  EXPECT_FALSE(comms_[0]->registrations[0].offerable) << "another GPU's memory";
  EXPECT_EQ(ncclCommDeregister(comms_[1], handles[0]), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comms_[0], handles[1]), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comms_[1], handles[2]), ncclSuccess);
  destroyAll();
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(memory_->live(), 0u);

  memory_->failAllocations = true;
  EXPECT_EQ(ncclMemAlloc(&p, 64), ncclUnhandledCudaError);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("stand-in: out of memory"), std::string::npos)
      << ncclGetLastError(nullptr);
}

// A failed allocation or a refused peer access fails init with a CUDA error on the ranks
// that hit it, and leaves nothing allocated.
TEST_F(GpuP2pTransportTest, AFailedAllocationOrPeerAccessFailsInitWithoutLeaks) {
  memory_->failAllocations = true;
  EXPECT_EQ(initOn("dgx_h100.xml", {0, 1, 2}), ncclUnhandledCudaError);
  EXPECT_EQ(memory_->live(), 0u);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("stand-in: out of memory"), std::string::npos)
      << ncclGetLastError(nullptr);

  memory_->failAllocations = false;
  memory_->failPeerAccess = true;
  EXPECT_EQ(initOn("dgx_h100.xml", {0, 1, 2}), ncclUnhandledCudaError);
  EXPECT_EQ(memory_->live(), 0u);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("cannot write"), std::string::npos)
      << ncclGetLastError(nullptr);
}

// One-sided calls on GPU communicators: host threads copy a put's bytes into its
// connection's slots and out again (src/rma), so those connections stay in host memory even
// where the ranks' channel connections are in GPU memory (a host memcpy into real device
// memory would crash the process).
TEST_F(GpuP2pTransportTest, OneSidedConnectionsStayInHostMemory) {
  ASSERT_EQ(initOn("dgx_h100.xml", {0, 1}), ncclSuccess);
  expectBuffersOnReceiversGpu();
  std::vector<float> window[2] = {std::vector<float>(1024, -1.0f), std::vector<float>(1024, -1.0f)};
  ncclWindow_t win[2] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ncclCommWindowRegister(comms_[r], window[r].data(), window[r].size() * sizeof(float), &win[r],
                                     NCCL_WIN_DEFAULT),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<float> src(100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  ASSERT_EQ(
      ncclPutSignal(src.data(), src.size(), ncclFloat32, 1, win[0], 16 * sizeof(float), 0, 0, 0, comms_[0], nullptr),
      ncclSuccess)
      << ncclGetLastError(comms_[0]);
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  ASSERT_EQ(ncclWaitSignal(1, &desc, comms_[1], nullptr), ncclSuccess) << ncclGetLastError(comms_[1]);
  for (size_t i = 0; i < window[1].size(); ++i) {
    const bool put = i >= 16 && i < 16 + src.size();
    ASSERT_EQ(window[1][i], put ? src[i - 16] : -1.0f) << "element " << i;
  }
  for (int r = 0; r < 2; ++r) {
    const int peer = 1 - r;
    for (const Connection* c : {&comms_[r]->rmaSend[peer], &comms_[r]->rmaRecv[peer]}) {
      ASSERT_TRUE(c->connected()) << "rank " << r;
      EXPECT_FALSE(c->end.gpuBuffers) << "rank " << r;
      for (int p = 0; p < kNumProtocols; ++p)
        EXPECT_EQ(gMemory->deviceOf(c->end.buffs[p]), -1) << "rank " << r << " proto " << p;
    }
  }
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ncclCommWindowDeregister(comms_[r], win[r]), ncclSuccess);
}

}  // namespace
}  // namespace chorus
