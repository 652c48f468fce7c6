// The CUDA executor through the public API, as NCCL programs use it: two ranks of one
// process sharing GPU 0 (CHORUS_ALLOW_SHARED_GPU=1), device buffers, each rank on its
// own stream; calls return at once and complete on the stream; CUDA graph capture and
// replay; ncclMemAlloc; the refusals; abort of a waiting kernel. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "device_ranks.h"
#include "nccl.h"

namespace chorus {
namespace {

using gpu_test::gpuUnavailableReason;

constexpr int kRanks = 2;

class GpuCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = gpuUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << "GPU tests skipped: " << why;
    setenv("CHORUS_ALLOW_SHARED_GPU", "1", 1);
    const int devs[kRanks] = {0, 0};
    ASSERT_EQ(ncclCommInitAll(comms_, kRanks, devs), ncclSuccess);
    for (auto& s : streams_) ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
    for (cudaStream_t s : streams_)
      if (s) cudaStreamDestroy(s);
    unsetenv("CHORUS_ALLOW_SHARED_GPU");
  }
  template <typename T>
  T* deviceCopy(const std::vector<T>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, sizeof(T) * std::max<size_t>(host.size(), 1)), cudaSuccess);
    cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // a pageable copy may land after it returns; the ranks' streams do not wait for it
    buffers_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> hostCopy(const T* device, size_t count) {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), device, sizeof(T) * count, cudaMemcpyDeviceToHost);
    return host;
  }
  void sync() {
    for (cudaStream_t s : streams_) ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (ncclComm_t c : comms_) {
      ncclResult_t async = ncclSuccess;
      ASSERT_EQ(ncclCommGetAsyncError(c, &async), ncclSuccess);
      ASSERT_EQ(async, ncclSuccess);
    }
  }
  ~GpuCommTest() override {
    for (void* p : buffers_) cudaFree(p);
  }

  ncclComm_t comms_[kRanks] = {};
  cudaStream_t streams_[kRanks] = {};
  std::vector<void*> buffers_;
};

float input(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 977) - 300); }

TEST_F(GpuCommTest, AllReduceOnDeviceBuffersCompletesOnTheStream) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    float* send[kRanks];
    float* recv[kRanks];
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = input(r, i);
      send[r] = deviceCopy(in);
      recv[r] = deviceCopy(std::vector<float>(count, -1));
    }
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r)
      ASSERT_EQ(ncclAllReduce(send[r], recv[r], count, ncclFloat32, ncclSum, comms_[r], streams_[r]), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    sync();
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<float> out = hostCopy(recv[r], count);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[i], input(0, i) + input(1, i)) << "count " << count << " i " << i;
    }
  }
}

TEST_F(GpuCommTest, ACommunicatorsKernelsStayInOrderAcrossStreams) {
  // The second call reads what the first wrote, on another stream of each rank: only the
  // communicator's own ordering of its kernels makes it see the sum.
  const size_t count = 1 << 20;
  cudaStream_t other[kRanks];
  for (auto& s : other) ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* a[kRanks];
  float* b[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    a[r] = deviceCopy(std::vector<float>(count, static_cast<float>(r + 1)));
    b[r] = deviceCopy(std::vector<float>(count, 0));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(ncclAllReduce(a[r], b[r], count, ncclFloat32, ncclSum, comms_[r], streams_[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(ncclAllReduce(b[r], a[r], count, ncclFloat32, ncclSum, comms_[r], other[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (cudaStream_t s : other) ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  sync();
  for (int r = 0; r < kRanks; ++r) {
    const auto out = hostCopy(a[r], count);
    for (size_t i = 0; i < count; i += 4099) ASSERT_EQ(out[i], 6.0f) << "rank " << r << " element " << i;
  }
  for (cudaStream_t s : other) cudaStreamDestroy(s);
}

TEST_F(GpuCommTest, MixedGroupOfTypesOpsCollectivesAndSendRecv) {
  const size_t count = 4096;
  std::vector<int32_t> ints(count);
  for (size_t i = 0; i < count; ++i) ints[i] = static_cast<int32_t>(i % 97) - 40;
  int32_t* maxIn[kRanks];
  int32_t* maxOut[kRanks];
  float* gatherIn[kRanks];
  float* gatherOut[kRanks];
  float* p2pIn[kRanks];
  float* p2pOut[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    std::vector<int32_t> mine = ints;
    for (auto& v : mine) v += r;  // rank 1's are larger
    maxIn[r] = deviceCopy(mine);
    maxOut[r] = deviceCopy(std::vector<int32_t>(count, 0));
    gatherIn[r] = deviceCopy(std::vector<float>(count, static_cast<float>(r + 1)));
    gatherOut[r] = deviceCopy(std::vector<float>(count * kRanks, 0));
    p2pIn[r] = deviceCopy(std::vector<float>(count, static_cast<float>(10 + r)));
    p2pOut[r] = deviceCopy(std::vector<float>(count, 0));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    const int peer = 1 - r;
    if (r == 1) {
      ASSERT_EQ(ncclRecv(p2pOut[r], count, ncclFloat32, peer, comms_[r], streams_[r]), ncclSuccess);
    }
    ASSERT_EQ(ncclAllReduce(maxIn[r], maxOut[r], count, ncclInt32, ncclMax, comms_[r], streams_[r]), ncclSuccess);
    ASSERT_EQ(ncclAllGather(gatherIn[r], gatherOut[r], count, ncclFloat32, comms_[r], streams_[r]), ncclSuccess);
    ASSERT_EQ(ncclSend(p2pIn[r], count, ncclFloat32, peer, comms_[r], streams_[r]), ncclSuccess);
    if (r == 0) {
      ASSERT_EQ(ncclRecv(p2pOut[r], count, ncclFloat32, peer, comms_[r], streams_[r]), ncclSuccess);
    }
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  sync();
  for (int r = 0; r < kRanks; ++r) {
    const auto mx = hostCopy(maxOut[r], count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(mx[i], ints[i] + 1) << "max, rank " << r;
    const auto g = hostCopy(gatherOut[r], count * kRanks);
    for (size_t i = 0; i < count * kRanks; ++i) ASSERT_EQ(g[i], static_cast<float>(i / count + 1)) << "gather";
    const auto p = hostCopy(p2pOut[r], count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(p[i], static_cast<float>(10 + (1 - r))) << "recv, rank " << r;
  }
}

TEST_F(GpuCommTest, CapturedGraphReplaysTheAllReduce) {
  const size_t count = 100000;
  float* send[kRanks];
  float* recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = deviceCopy(std::vector<float>(count, 0));
    recv[r] = deviceCopy(std::vector<float>(count, -1));
  }
  cudaGraph_t graphs[kRanks];
  cudaGraphExec_t execs[kRanks];
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(cudaStreamBeginCapture(streams_[r], cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(ncclAllReduce(send[r], recv[r], count, ncclFloat32, ncclSum, comms_[r], streams_[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cudaStreamEndCapture(streams_[r], &graphs[r]), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&execs[r], graphs[r], 0), cudaSuccess);
  }
  for (int round = 1; round <= 3; ++round) {
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> in(count, static_cast<float>(round * (r + 1)));
      cudaMemcpy(send[r], in.data(), sizeof(float) * count, cudaMemcpyHostToDevice);
    }
    cudaDeviceSynchronize();
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], streams_[r]), cudaSuccess);
    sync();
    for (int r = 0; r < kRanks; ++r) {
      const auto out = hostCopy(recv[r], count);
      for (size_t i = 0; i < count; i += 997) ASSERT_EQ(out[i], static_cast<float>(3 * round)) << "round " << round;
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
  }
}

TEST_F(GpuCommTest, MemAllocGivesDeviceMemoryThatCollectivesUse) {
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 4096), ncclSuccess);
  cudaPointerAttributes attrs{};
  ASSERT_EQ(cudaPointerGetAttributes(&attrs, p), cudaSuccess);
  EXPECT_EQ(attrs.type, cudaMemoryTypeDevice);
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
}

// Registered ncclMemAlloc buffers: a Send/Recv larger than the slots is written by the
// sender's kernel straight into the receiver's buffer (zero-copy), both ways at once.
TEST_F(GpuCommTest, RegisteredSendRecvMovesInPlace) {
  const size_t count = size_t{4} << 20;  // 16 MiB: past the 1 MiB of slots
  void* send[kRanks];
  void* recv[kRanks];
  void* handles[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclMemAlloc(&send[r], count * sizeof(float)), ncclSuccess);
    ASSERT_EQ(ncclMemAlloc(&recv[r], count * sizeof(float)), ncclSuccess);
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = input(r, i);
    ASSERT_EQ(cudaMemcpy(send[r], in.data(), count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(recv[r], 0, count * sizeof(float)), cudaSuccess);
    ASSERT_EQ(ncclCommRegister(comms_[r], recv[r], count * sizeof(float), &handles[r]), ncclSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(ncclSend(send[r], count, ncclFloat32, 1 - r, comms_[r], streams_[r]), ncclSuccess);
    ASSERT_EQ(ncclRecv(recv[r], count, ncclFloat32, 1 - r, comms_[r], streams_[r]), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  sync();
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = hostCopy(static_cast<const float*>(recv[r]), count);
    for (size_t i = 0; i < count; i += 4093) ASSERT_EQ(got[i], input(1 - r, i)) << "rank " << r << " index " << i;
    ASSERT_EQ(got[count - 1], input(1 - r, count - 1));
    EXPECT_EQ(ncclCommDeregister(comms_[r], handles[r]), ncclSuccess);
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ncclMemFree(send[r]), ncclSuccess);
    EXPECT_EQ(ncclMemFree(recv[r]), ncclSuccess);
  }
}

TEST_F(GpuCommTest, PageableHostMemoryOnAGpuCommunicatorIsRefused) {
  float* device = deviceCopy(std::vector<float>(16, 1));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    ASSERT_EQ(ncclAllReduce(device, device, 16, ncclFloat32, ncclSum, comms_[r], streams_[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  sync();
  std::vector<float> pageable(16, 1);
  EXPECT_EQ(ncclAllReduce(pageable.data(), pageable.data(), 16, ncclFloat32, ncclSum, comms_[0], streams_[0]),
            ncclInvalidArgument);
}

TEST_F(GpuCommTest, AbortEndsAKernelWaitingForItsPeer) {
  float* buf = deviceCopy(std::vector<float>(1024, 1));
  // Only rank 0 calls: its kernel waits for rank 1 forever, unless aborted.
  ASSERT_EQ(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comms_[0], streams_[0]), ncclSuccess);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(cudaStreamQuery(streams_[0]), cudaErrorNotReady) << "the call returned at once; the kernel waits";
  EXPECT_EQ(ncclCommAbort(comms_[0]), ncclSuccess);
  comms_[0] = nullptr;
  EXPECT_EQ(cudaStreamSynchronize(streams_[0]), cudaSuccess);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

TEST(GpuCommInitTest, RanksSharingAGpuAreRefusedUnlessAllowed) {
  const std::string why = gpuUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "GPU tests skipped: " << why;
  unsetenv("CHORUS_ALLOW_SHARED_GPU");
  ncclComm_t comms[2] = {};
  const int devs[2] = {0, 0};
  EXPECT_EQ(ncclCommInitAll(comms, 2, devs), ncclInvalidUsage);
}

}  // namespace
}  // namespace chorus
