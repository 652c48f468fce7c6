// The host side of the CUDA executor without a GPU: the fake driver (fake_cuda_driver.h)
// says which buffers are device memory, and a stand-in executor (GpuLaunchHooks) records
// the staged launches instead of running kernels. Checks which communicators become GPU
// communicators, what they refuse, and how a group's calls become kernel launches (one
// per kernel run, in an order every rank agrees on, on the group's streams).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "chorus.h"
#include "core/cuda_driver_api.h"
#include "core/debug.h"
#include "fake_cuda_driver.h"
#include "nccl.h"
#include "predicted_time.h"
#include "src/comm/comm.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/topo/topo_init.h"
#include "src/topo/topo_search.h"
#include "src/topo/topo_system.h"
#include "src/topo/topo_xml.h"
#include "warnings_during.h"

namespace chorus {
namespace {

using fixtures::anyMentions;
using fixtures::fakeDriver;
using fixtures::kFakeDeviceOrdinal;
using fixtures::warningsDuring;

struct RecordedLaunch {
  int rank;
  ncclDataType_t dtype;
  RedKind kind;
  std::vector<WorkItem> items;  // every lane's, lane by lane
  std::vector<cudaStream_t> streams;
};
std::vector<RecordedLaunch> gLaunches;

const GpuLaunchHooks kStandIn = {
    [](std::string*) { return true; },
    [](ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
       const std::vector<cudaStream_t>& streams) {
      RecordedLaunch launch{comm->rank, dtype, kind, {}, streams};
      for (const Lane* lane : lanes) launch.items.insert(launch.items.end(), lane->items.begin(), lane->items.end());
      gLaunches.push_back(launch);
      return ncclSuccess;
    },
    nullptr,  // P2P FIFOs stay in host memory (gpu_p2p_transport_test.cc puts them on GPUs)
    nullptr,  // no bound on a kernel's lanes (gpu_kernel_bound_test.cc sets one)
};

cudaStream_t streamNamed(uintptr_t n) { return reinterpret_cast<cudaStream_t>(n); }

class GpuHostPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv(kCudaDriverLibraryEnv, fixtures::kFakeDriver, 1);  // before the first Chorus call
    fake_ = fakeDriver();
    ASSERT_NE(fake_.deviceMemory, nullptr);
    device_ = reinterpret_cast<float*>(fake_.deviceMemory);
    setGpuLaunchHooksForTesting(&kStandIn);
    gLaunches.clear();
  }
  void TearDown() override {
    for (ncclComm_t c : comms_) {
      if (c) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
    setGpuLaunchHooksForTesting(nullptr);
    unsetenv("CHORUS_ALLOW_SHARED_GPU");
  }
  // Rank r on CUDA device devs[r] of a DGX H100 (tests/topo, NCCL_TOPO_FILE), with small
  // buffers: all the connections are in this process.
  ncclResult_t initOnDgxH100(const std::vector<int>& devs) {
    const std::string file = CHORUS_TOPO_TEST_DIR "/dgx_h100.xml";
    setenv("NCCL_TOPO_FILE", file.c_str(), 1);
    setenv("NCCL_BUFFSIZE", "65536", 1);
    setenv("NCCL_LL_BUFFSIZE", "16384", 1);
    setenv("NCCL_LL128_BUFFSIZE", "65536", 1);
    comms_.assign(devs.size(), nullptr);
    const ncclResult_t made = ncclCommInitAll(comms_.data(), static_cast<int>(devs.size()), devs.data());
    for (const char* name : {"NCCL_TOPO_FILE", "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE"})
      unsetenv(name);
    return made;
  }
  // `n` ranks, all on the fake's GPU (n > 1 needs CHORUS_ALLOW_SHARED_GPU=1).
  ncclResult_t initOnFakeGpu(int n) {
    comms_.assign(n, nullptr);
    std::vector<int> devs(n, kFakeDeviceOrdinal);
    return ncclCommInitAll(comms_.data(), n, devs.data());
  }
  fixtures::FakeDriver fake_;
  float* device_ = nullptr;  // 4096 floats of "device memory"
  std::vector<ncclComm_t> comms_;
};

TEST_F(GpuHostPathTest, AGroupBecomesOneLaunchPerKernelRunOnItsStreams) {
  ASSERT_EQ(initOnFakeGpu(1), ncclSuccess);
  ncclComm_t comm = comms_[0];
  float* a = device_;
  float* b = device_ + 256;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a, 10, ncclFloat32, 0, comm, streamNamed(0x10)), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a, b, 100, ncclFloat32, ncclSum, comm, streamNamed(0x20)), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a, b, 100, ncclFloat32, ncclSum, comm, streamNamed(0x10)), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a, b, 100, ncclFloat32, ncclMax, comm, streamNamed(0x10)), ncclSuccess);
  ASSERT_EQ(ncclAllGather(a, b, 100, ncclFloat32, comm, streamNamed(0x10)), ncclSuccess);
  ASSERT_EQ(ncclRecv(b, 10, ncclFloat32, 0, comm, streamNamed(0x10)), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);

  ASSERT_EQ(gLaunches.size(), 4u);
  const std::vector<cudaStream_t> streams = {streamNamed(0x10), streamNamed(0x20)};  // first call's first
  for (const RecordedLaunch& l : gLaunches) EXPECT_EQ(l.streams, streams);
  EXPECT_EQ(gLaunches[0].dtype, ncclFloat32);  // the two sums share the Sum kernel
  EXPECT_EQ(gLaunches[0].kind, RedKind::Sum);
  ASSERT_FALSE(gLaunches[0].items.empty());
  for (const WorkItem& w : gLaunches[0].items) EXPECT_EQ(w.kind, WorkKind::AllReduce);
  EXPECT_EQ(gLaunches[1].kind, RedKind::Max);  // the run-time-op kernel
  EXPECT_EQ(gLaunches[2].dtype, ncclUint8);    // AllGather as bytes
  ASSERT_FALSE(gLaunches[2].items.empty());
  EXPECT_EQ(gLaunches[2].items[0].kind, WorkKind::AllGather);
  EXPECT_EQ(gLaunches[2].items[0].blockCount, 400u);
  // The send to self and the receive from self, last, as one local copy of 40 bytes.
  EXPECT_EQ(gLaunches[3].dtype, ncclUint8);
  ASSERT_EQ(gLaunches[3].items.size(), 1u);
  EXPECT_EQ(gLaunches[3].items[0].kind, WorkKind::LocalCopy);
  EXPECT_EQ(gLaunches[3].items[0].range.count, 40u);
  EXPECT_EQ(gLaunches[3].items[0].sendbuff, a);
  EXPECT_EQ(gLaunches[3].items[0].recvbuff, b);
}

TEST_F(GpuHostPathTest, AGpuCommunicatorTakesManagedMemoryAndRefusesPageableMemory) {
  ASSERT_EQ(initOnFakeGpu(1), ncclSuccess);
  ncclComm_t comm = comms_[0];
  ASSERT_EQ(ncclAllReduce(device_, device_ + 256, 16, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(gLaunches.size(), 1u);
  auto* managed = reinterpret_cast<float*>(fake_.managedMemory);
  EXPECT_EQ(ncclAllReduce(managed, device_, 16, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(gLaunches.size(), 2u);
  std::vector<float> pageable(16, 1.0f);
  EXPECT_EQ(ncclAllReduce(pageable.data(), device_, 16, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  const std::string error = ncclGetLastError(comm);
  EXPECT_NE(error.find("pageable host memory"), std::string::npos) << error;
  EXPECT_EQ(gLaunches.size(), 2u) << "a refused call launches nothing";
}

TEST_F(GpuHostPathTest, DeviceMemoryOfAnotherGpuIsRefused) {
  comms_.assign(1, nullptr);
  const int dev = 0;
  ASSERT_EQ(ncclCommInitAll(comms_.data(), 1, &dev), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(device_, device_, 16, ncclFloat32, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  const std::string error = ncclGetLastError(comms_[0]);
  EXPECT_NE(error.find("is memory of GPU 3, but communicator"), std::string::npos) << error;
  EXPECT_TRUE(gLaunches.empty());
}

TEST_F(GpuHostPathTest, RanksSharingAGpuNeedTheSwitch) {
  EXPECT_EQ(initOnFakeGpu(2), ncclInvalidUsage) << "NCCL refuses duplicate devices";
  setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
  ASSERT_EQ(initOnFakeGpu(2), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ncclAllReduce(device_ + 256 * r, device_ + 512 + 256 * r, 64, ncclFloat32, ncclSum, comms_[r],
                            streamNamed(0x100 + r)),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(gLaunches.size(), 2u);
  EXPECT_EQ(gLaunches[0].rank, 0);
  EXPECT_EQ(gLaunches[1].rank, 1);
  EXPECT_EQ(gLaunches[1].streams, std::vector<cudaStream_t>{streamNamed(0x101)});
  unsetenv("CHORUS_ALLOW_SHARED_GPU");

  // Ranks that find themselves on one GPU at init (the calling thread's current device):
  // every rank refuses alike, none waits for the others.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t shared[2] = {};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(ncclCommInitRank(&shared[r], 2, id, r), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  const std::string error = ncclGetLastError(nullptr);
  EXPECT_NE(error.find("rank 0 and rank 1 both use CUDA device 0"), std::string::npos) << error;

  // A CPU communicator's rank does not hold the GPU.
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&shared[0], 2, id, 0), ncclSuccess);
  ASSERT_EQ(chorusCommInitRankExecutor(&shared[1], 2, id, 1, nullptr, chorusExecutorCpu), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  comms_.assign(shared, shared + 2);
}

// Allowed, sharing a GPU still risks a hang (streams on one hardware queue) or slowness
// (other processes' kernels in turns): a WARN names what to set.
TEST_F(GpuHostPathTest, RanksSharingAGpuInOneProcessAreToldAboutTheHardwareQueues) {
  setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::vector<std::string> warned = warningsDuring([&] { ASSERT_EQ(initOnFakeGpu(2), ncclSuccess); });
  EXPECT_TRUE(anyMentions(warned, "2 ranks of this process share CUDA device 3")) << ::testing::PrintToString(warned);
  EXPECT_TRUE(anyMentions(warned, "set CUDA_DEVICE_MAX_CONNECTIONS=32"));
  EXPECT_EQ(
      std::count_if(warned.begin(), warned.end(),
                    [](const std::string& l) { return l.find("CUDA_DEVICE_MAX_CONNECTIONS") != std::string::npos; }),
      1)
      << "once per communicator";
  for (ncclComm_t& c : comms_) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  comms_.clear();
  // With every hardware queue in use, nothing to say.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  warned = warningsDuring([&] { ASSERT_EQ(initOnFakeGpu(2), ncclSuccess); });
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  EXPECT_FALSE(anyMentions(warned, "CUDA_DEVICE_MAX_CONNECTIONS")) << ::testing::PrintToString(warned);
}

// A GPU communicator from init: its first call may not be host memory. Asked for, a CPU
// communicator runs on the CPU executor on the same machine, and so do its children.
TEST_F(GpuHostPathTest, TheExecutorIsDecidedAtInitAndACpuCommunicatorCanBeAskedFor) {
  ASSERT_EQ(initOnFakeGpu(1), ncclSuccess);
  chorusExecutor_t executor = chorusExecutorAuto;
  ASSERT_EQ(chorusCommGetExecutor(comms_[0], &executor), ncclSuccess);
  EXPECT_EQ(executor, chorusExecutorGpu);
  std::vector<float> send(16, 2.0f), recv(16, 0.0f);
  EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 16, ncclFloat32, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  std::string error = ncclGetLastError(comms_[0]);
  EXPECT_NE(error.find("pageable host memory"), std::string::npos) << error;

  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t cpu = nullptr;
  ASSERT_EQ(chorusCommInitRankExecutor(&cpu, 1, id, 0, nullptr, chorusExecutorCpu), ncclSuccess);
  comms_.push_back(cpu);
  ASSERT_EQ(chorusCommGetExecutor(cpu, &executor), ncclSuccess);
  EXPECT_EQ(executor, chorusExecutorCpu);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), 16, ncclFloat32, ncclSum, cpu, nullptr), ncclSuccess);
  EXPECT_EQ(recv, send) << "run by the CPU executor";
  EXPECT_EQ(ncclAllReduce(device_, device_, 16, ncclFloat32, ncclSum, cpu, nullptr), ncclInvalidArgument);
  error = ncclGetLastError(cpu);
  EXPECT_NE(error.find("is a CPU communicator (chorusCommInitRankExecutor asked for it)"), std::string::npos) << error;

  ncclComm_t child = nullptr;
  ASSERT_EQ(ncclCommSplit(cpu, 0, 0, &child, nullptr), ncclSuccess);
  comms_.push_back(child);
  ASSERT_EQ(chorusCommGetExecutor(child, &executor), ncclSuccess);
  EXPECT_EQ(executor, chorusExecutorCpu) << "a split keeps its parent's executor";

  setenv("CHORUS_EXECUTOR", "cpu", 1);
  ncclComm_t byEnv = nullptr;
  const int dev = kFakeDeviceOrdinal;
  const ncclResult_t made = ncclCommInitAll(&byEnv, 1, &dev);
  unsetenv("CHORUS_EXECUTOR");
  ASSERT_EQ(made, ncclSuccess);
  comms_.push_back(byEnv);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), 16, ncclFloat32, ncclSum, byEnv, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(device_, device_, 16, ncclFloat32, ncclSum, byEnv, nullptr), ncclInvalidArgument);
  error = ncclGetLastError(byEnv);
  EXPECT_NE(error.find("(CHORUS_EXECUTOR=cpu asked for it)"), std::string::npos) << error;
  EXPECT_TRUE(gLaunches.empty());
}

// GPU communicators take their ring and channel count from the topology search, as NCCL
// takes them from its graph search: eight ranks on a DGX H100's GPUs (NCCL_TOPO_FILE),
// handed out of order. All their connections are in this process, with small buffers.
TEST_F(GpuHostPathTest, GpuCommunicatorsTakeTheirRingAndChannelsFromTheTopology) {
  const std::vector<int> devs = {3, 0, 6, 1, 7, 2, 5, 4};  // rank r on CUDA device devs[r]
  const int n = static_cast<int>(devs.size());
  ASSERT_EQ(initOnDgxH100(devs), ncclSuccess);

  // What the search says: the GPUs' ring order and the narrowest hop's bandwidth.
  topo::XmlNode xml;
  ASSERT_EQ(topo::loadXmlFile(CHORUS_TOPO_TEST_DIR "/dgx_h100.xml", &xml), ncclSuccess);
  topo::TopoSystem system;
  std::string error;
  ASSERT_EQ(topo::TopoSystem::fromXml(xml, &system, &error), ncclSuccess) << error;
  const topo::RingPlan plan = topo::searchRing(system, 1);
  ASSERT_EQ(plan.order.size(), devs.size());
  std::vector<int> ring;  // the ranks in the search's order of their GPUs
  for (int gpu : plan.order)
    for (int r = 0; r < n; ++r)
      if (devs[r] == system.node(gpu).gpuDev) ring.push_back(r);
  ASSERT_EQ(ring.size(), devs.size());
  std::vector<int> byRank(n);
  for (int r = 0; r < n; ++r) byRank[r] = r;
  ASSERT_NE(ring, byRank) << "the devices were handed out of order: the ring must differ from rank order";
  const size_t channels = static_cast<size_t>(std::ceil(plan.intraBw / topo::kGpuChannelGBs));
  EXPECT_EQ(channels, 16u) << "18 NVLinks of 20.6 GB/s, as NCCL's 16 channels on a DGX H100";

  for (int r = 0; r < n; ++r) {
    const ncclComm* comm = comms_[r];
    ASSERT_EQ(comm->channels.size(), channels) << "rank " << r;
    const int place = static_cast<int>(std::find(ring.begin(), ring.end(), r) - ring.begin());
    for (const Channel& ch : comm->channels)
      for (int k = 0; k < n; ++k) ASSERT_EQ(ch.ringRanks[k], ring[(place + k) % n]) << "rank " << r << " hop " << k;
  }
}

// A GPU communicator's calls are priced with NCCL's GPU figures (tune_constants.h), not
// the CPU calibration: ncclGroupSimulateEnd for an AllReduce on eight GPUs of a DGX H100.
// The table it prints is BENCHMARKS.md's "predicted" one: model output, not measurement.
TEST_F(GpuHostPathTest, AGpuCommunicatorIsPricedWithNcclsGpuFigures) {
  ASSERT_EQ(initOnDgxH100({0, 1, 2, 3, 4, 5, 6, 7}), ncclSuccess);
  auto* buf = reinterpret_cast<float*>(fake_.managedMemory);  // a GPU can reach it
  const double n = 8;
  auto predictUs = [&](size_t bytes) { return fixtures::predictedAllReduceUs(comms_[0], buf, bytes); };
  std::printf("AllReduce, 8 GPUs of a DGX H100, predicted:\n%12s %12s %14s\n", "bytes", "time (us)", "busbw (GB/s)");
  double previous = 0;
  for (size_t bytes = 8; bytes <= (size_t(256) << 20); bytes *= 8) {
    const double us = predictUs(bytes);
    const double busbw = static_cast<double>(bytes) / us / 1e3 * 2 * (n - 1) / n;
    std::printf("%12zu %12.2f %14.2f\n", bytes, us, busbw);
    EXPECT_GE(us, previous) << bytes << " bytes";
    previous = us;
  }
  // A small call costs NCCL's base latency and a few LL hops over NVLink (3.6 + 7 x 0.47 us
  // for the gathering AllReduce), not the CPU executor's 2 us per in-process hop.
  const double small = predictUs(8);
  EXPECT_GT(small, 3.6);
  EXPECT_LT(small, 3.6 + 14 * 0.47 + 0.5);
  // A large one streams at the ring's narrowest hop: 18 NVLinks x 20.6 GB/s over 16 channels.
  const double large = static_cast<double>(size_t(256) << 20);
  const double largeUs = predictUs(size_t(256) << 20);
  const double busbw = large / largeUs / 1e3 * 2 * (n - 1) / n;
  std::printf("%12zu %12.2f %14.2f\n", size_t(256) << 20, largeUs, busbw);
  EXPECT_GT(busbw, 0.95 * 18 * 20.6);
  EXPECT_LE(busbw, 18 * 20.6 * 1.001);
}

// A CPU communicator, and a GPU missing from the topology, keep rank order.
TEST_F(GpuHostPathTest, WithoutAPlaceInTheTopologyTheRingIsInRankOrder) {
  setenv("NCCL_TOPO_FILE", CHORUS_TOPO_TEST_DIR "/dgx_h100.xml", 1);
  const std::vector<int> devs = {12, 0};  // device 12 is not in the topology
  comms_.assign(2, nullptr);
  const ncclResult_t made = ncclCommInitAll(comms_.data(), 2, devs.data());
  unsetenv("NCCL_TOPO_FILE");
  ASSERT_EQ(made, ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(comms_[r]->channels.empty());
    EXPECT_EQ(comms_[r]->channels[0].ringRanks[1], 1 - r);
    EXPECT_EQ(comms_[r]->channels[0].ringRanks[0], r);
  }
  EXPECT_EQ(comms_[0]->channels.size(), 1u) << "one channel without a topology for the GPU";
}

}  // namespace
}  // namespace chorus
