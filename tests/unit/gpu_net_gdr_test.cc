// GPUDirect RDMA on the host path: GPU communicators whose connections go over the network
// (here the test net plugin, posing as a DGX H100's NIC that takes GPU memory) keep each
// end's slots in its GPU's memory where the net, NCCL_NET_GDR_LEVEL and NCCL_NET_GDR_READ
// allow, registered by dma-buf, and flush the NIC's writes before the kernel reads them.
// The GPU memory is a stand-in's (host memory), and the kernels run on the CPU
// (running_gpu_stand_in.h), so the data crosses the connections for real.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda_driver_api.h"
#include "core/path_type.h"
#include "fake_cuda_driver.h"
#include "nccl.h"
#include "predicted_time.h"
#include "running_gpu_stand_in.h"
#include "src/comm/comm.h"
#include "stand_in_gpu_memory.h"
#include "transport/net/net_choice.h"

namespace chorus {
namespace {

using fixtures::StandInGpuMemory;

const char* const kSettings[] = {"NCCL_TOPO_FILE",     "NCCL_P2P_DISABLE",
                                 "NCCL_SHM_DISABLE",   "CHORUS_ALLOW_SHARED_GPU",
                                 "NCCL_NET_PLUGIN",    "CHORUS_TEST_NET_DEVICE_NAME",
                                 "NCCL_NET_GDR_READ",  "CHORUS_TEST_NET_PTR_SUPPORT",
                                 "NCCL_NET_GDR_LEVEL", "NCCL_NET"};

class GpuNetGdrTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 2;
  static constexpr size_t kCount = 1000;  // floats: several 4 KiB steps

  void SetUp() override {
    setenv(kCudaDriverLibraryEnv, fixtures::kFakeDriver, 1);  // before the first Chorus call
    memory_ = std::make_unique<StandInGpuMemory>();
    hooks_ = GpuLaunchHooks{[](std::string*) { return true; }, fixtures::keepKernel, memory_.get(), nullptr};
    setGpuLaunchHooksForTesting(&hooks_);
    fixtures::gKernels.clear();
    // Both ranks on the DGX H100's GPU 3 (where the fake driver's device memory is), apart as
    // if on two hosts: only the network, the test plugin, joins them, through GPU 3's NIC.
    setenv("NCCL_TOPO_FILE", CHORUS_TOPO_TEST_DIR "/dgx_h100.xml", 1);
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
    setenv("NCCL_NET_PLUGIN", CHORUS_TEST_NET_PLUGIN_PATH, 1);
    setenv("NCCL_NET", "chorustest-v8", 1);
    setenv("CHORUS_TEST_NET_DEVICE_NAME", "mlx5_3", 1);
    setenv("NCCL_NET_GDR_READ", "1", 1);
    setenv("NCCL_BUFFSIZE", "16384", 1);
  }
  void TearDown() override {
    destroyAll();
    EXPECT_EQ(memory_->live(), 0u) << "GPU memory left allocated";
    EXPECT_EQ(memory_->badReleases(), 0);
    setGpuLaunchHooksForTesting(nullptr);
    for (const char* name : kSettings) unsetenv(name);
    unsetenv("NCCL_BUFFSIZE");
  }

  void destroyAll() {
    for (ncclComm_t c : comms_) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
    }
    comms_.clear();
  }

  // The NIC's flags (NCCL_PTR_*): 1 host, 2 CUDA, 4 dma-buf.
  void init(int ptrSupport) {
    setenv("CHORUS_TEST_NET_PTR_SUPPORT", std::to_string(ptrSupport).c_str(), 1);
    comms_.assign(kRanks, nullptr);
    const std::vector<int> devs(kRanks, fixtures::kFakeDeviceOrdinal);
    ASSERT_EQ(ncclCommInitAll(comms_.data(), kRanks, devs.data()), ncclSuccess) << ncclGetLastError(nullptr);
    // The process's net is chosen once, at its first connection (ctest runs each test alone).
    if (std::string(processNetLabel()) != "NET/chorustest-v8")
      GTEST_SKIP() << "this process chose " << processNetLabel() << " before this test";
  }

  // An AllReduce of device buffers, its kernels run on the CPU: every element exact.
  void allReduceRuns() {
    fixtures::gKernels.clear();
    float* device = reinterpret_cast<float*>(fixtures::fakeDriver().deviceMemory);
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i) device[r * 2 * kCount + i] = static_cast<float>(r * 1000 + i % 97);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      float* in = device + r * 2 * kCount;
      ASSERT_EQ(ncclAllReduce(in, in + kCount, kCount, ncclFloat32, ncclSum, comms_[r], nullptr), ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
    std::vector<ncclResult_t> results(kRanks, ncclInternalError);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] { results[r] = fixtures::runKernels(comms_[r], fixtures::gKernels[r], 20); });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(results[r], ncclSuccess) << "rank " << r;
      for (size_t i = 0; i < kCount; ++i)
        ASSERT_EQ(device[r * 2 * kCount + kCount + i], static_cast<float>(1000 + 2 * (i % 97))) << r << " at " << i;
    }
  }

  // Of rank r's connections to its peer: how many ends of each direction keep their slots
  // in its GPU's memory, and how many in host memory.
  struct Ends {
    int gpuSending = 0, gpuReceiving = 0, hostSending = 0, hostReceiving = 0;
  };
  Ends endsOf(int r) {
    Ends e;
    comms_[r]->forEachConnection([&](Connection& c) {
      if (!c.connected()) return;
      const bool gpu = c.end.gpuBuffers && memory_->deviceOf(c.end.buffs[0]) == fixtures::kFakeDeviceOrdinal;
      EXPECT_EQ(c.end.gpuBuffers, gpu) << "GPU slots that are not the stand-in's memory of the rank's GPU";
      (gpu ? (c.end.sending ? e.gpuSending : e.gpuReceiving) : (c.end.sending ? e.hostSending : e.hostReceiving))++;
    });
    return e;
  }

  static int pluginCounter(const char* name) {
    void* plugin = dlopen(CHORUS_TEST_NET_PLUGIN_PATH, RTLD_NOW | RTLD_NOLOAD);
    if (plugin == nullptr) return 0;  // not loaded yet: nothing counted
    const int* counter = static_cast<const int*>(dlsym(plugin, name));
    const int value = counter != nullptr ? __atomic_load_n(counter, __ATOMIC_RELAXED) : 0;
    dlclose(plugin);
    return value;
  }

  std::unique_ptr<StandInGpuMemory> memory_;
  GpuLaunchHooks hooks_{};
  std::vector<ncclComm_t> comms_;
};

TEST_F(GpuNetGdrTest, SlotsAreGpuMemoryRegisteredByDmaBufAndTheDataCrosses) {
  const int dmaBufsBefore = pluginCounter("chorusTestNetDmaBufRegistrations");
  init(1 | 2 | 4);
  ASSERT_NO_FATAL_FAILURE(allReduceRuns());
  for (int r = 0; r < kRanks; ++r) {
    const Ends e = endsOf(r);
    EXPECT_GT(e.gpuSending, 0) << "rank " << r;
    EXPECT_GT(e.gpuReceiving, 0) << "rank " << r;
    EXPECT_EQ(e.hostSending + e.hostReceiving, 0) << "rank " << r;
    EXPECT_GT(memory_->bytesOn(fixtures::kFakeDeviceOrdinal), 0u);
  }
  // Every end registered its slots by dma-buf, and received steps were flushed.
  const Ends e0 = endsOf(0), e1 = endsOf(1);
  const int ends = e0.gpuSending + e0.gpuReceiving + e1.gpuSending + e1.gpuReceiving;
  EXPECT_EQ(memory_->dmaBufs(), ends);
  EXPECT_EQ(pluginCounter("chorusTestNetDmaBufRegistrations") - dmaBufsBefore, ends);
  EXPECT_GT(memory_->flushes(), 0);
}

TEST_F(GpuNetGdrTest, WithoutDmaBufTheSlotsAreRegisteredAsCudaMemory) {
  const int before = pluginCounter("chorusTestNetCudaRegistrations");
  init(1 | 2);
  ASSERT_NO_FATAL_FAILURE(allReduceRuns());
  EXPECT_EQ(memory_->dmaBufs(), 0);
  const Ends e = endsOf(0);
  EXPECT_GT(e.gpuSending + e.gpuReceiving, 0);
  EXPECT_GE(pluginCounter("chorusTestNetCudaRegistrations") - before, e.gpuSending + e.gpuReceiving);
}

TEST_F(GpuNetGdrTest, TheNetTheGdrLevelAndGdrReadDecideEachEnd) {
  // A net that takes host memory only.
  init(1);
  ASSERT_FALSE(comms_[0]->nearNicPaths.empty());
  EXPECT_EQ(comms_[0]->nearNicPaths.front(), static_cast<int>(PathType::PIX)) << "GPU 3 and mlx5_3 share a switch port";
  for (int r = 0; r < kRanks; ++r) {
    const Ends e = endsOf(r);
    EXPECT_EQ(e.gpuSending + e.gpuReceiving, 0);
    EXPECT_GT(e.hostSending + e.hostReceiving, 0);
  }
  destroyAll();
  // A level nearer than the path from GPU 3 to its NIC.
  setenv("NCCL_NET_GDR_LEVEL", "LOC", 1);
  init(1 | 2 | 4);
  EXPECT_EQ(endsOf(0).gpuSending + endsOf(0).gpuReceiving, 0);
  destroyAll();
  // Without GDR reads the senders stage through host memory; the NIC still writes the receivers' GPUs.
  unsetenv("NCCL_NET_GDR_LEVEL");
  setenv("NCCL_NET_GDR_READ", "0", 1);
  init(1 | 2 | 4);
  ASSERT_NO_FATAL_FAILURE(allReduceRuns());
  const Ends e = endsOf(0);
  EXPECT_EQ(e.gpuSending, 0);
  EXPECT_GT(e.hostSending, 0);
  EXPECT_GT(e.gpuReceiving, 0);
}

TEST_F(GpuNetGdrTest, AReceiverThatCannotFlushKeepsItsSlotsInHostMemory) {
  memory_->failFlush = true;
  init(1 | 2 | 4);
  ASSERT_NO_FATAL_FAILURE(allReduceRuns());
  const Ends e = endsOf(1);
  EXPECT_EQ(e.gpuReceiving, 0);
  EXPECT_GT(e.hostReceiving, 0);
  EXPECT_GT(e.gpuSending, 0);
}

// Across hosts a GPU communicator is priced with NCCL's network figures: a hop costs
// NCCL's network latency, not the CPU calibration's loopback TCP (35 us), and the channels
// share the NIC's bandwidth (mlx5_3: 400 Gb/s), not the socket net's 1.6 GB/s.
TEST_F(GpuNetGdrTest, AcrossHostsAGpuCommunicatorIsPricedWithNcclsNetworkFigures) {
  init(1 | 2 | 4);
  const double nicGBs = comms_[0]->peers[0].nicGBs;
  ASSERT_GT(nicGBs, 40.0) << "mlx5_3's 400 Gb/s port, or the PCI link to it";
  ASSERT_LE(nicGBs, 50.0);
  float* buf = reinterpret_cast<float*>(fixtures::fakeDriver().deviceMemory);
  auto predictUs = [&](size_t bytes) { return fixtures::predictedAllReduceUs(comms_[0], buf, bytes); };
  std::printf("AllReduce, 2 GPUs of two DGX H100s over the network, predicted:\n%12s %12s %14s\n", "bytes", "time (us)",
              "busbw (GB/s)");
  for (size_t bytes = 8; bytes <= (size_t(256) << 20); bytes *= 8) {
    const double us = predictUs(bytes);
    std::printf("%12zu %12.2f %14.2f\n", bytes, us, static_cast<double>(bytes) / us / 1e3);
  }
  // Two ranks: one hop each way, NCCL's base latency and an LL network hop (3.6 + 2.7 us).
  const double small = predictUs(8);
  EXPECT_GT(small, 3.6);
  EXPECT_LT(small, 3.6 + 2 * 2.7 + 1.0);
  // 256 MiB streams at the NIC's bandwidth (2 ranks: busbw = bytes / time).
  const double large = static_cast<double>(size_t(256) << 20);
  const double busbw = large / predictUs(size_t(256) << 20) / 1e3;
  EXPECT_GT(busbw, 0.9 * nicGBs);
  EXPECT_LE(busbw, nicGBs * 1.001);
}

}  // namespace
}  // namespace chorus
