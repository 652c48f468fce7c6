// Collectives refuse GPU device memory with ncclInvalidArgument and a WARN naming the
// function, the argument, its value and the GPU, instead of letting the CPU executor
// touch it. A fake driver (fake_cuda_driver.c, named by CHORUS_CUDA_DRIVER_LIBRARY before
// the first Chorus call) plays the GPU; the driver-absent and cuInit-failure paths run in
// fresh processes, since the driver is opened once per process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus.h"
#include "core/cuda_driver_api.h"
#include "fake_cuda_driver.h"
#include "nccl.h"
#include "src/executor/cuda/cuda_executor.h"

namespace chorus {
namespace {

using fixtures::FakeDriver;
using fixtures::fakeDriver;
using fixtures::kFakeDriver;
constexpr const char* kMissingDriver = "/nonexistent/chorus-cuda-guard/libcuda.so.1";
constexpr size_t kCount = 16;  // floats: fits the fake's 4 KiB managed arrays

std::string addressText(const void* ptr) {
  char text[32];
  snprintf(text, sizeof(text), "%p", ptr);
  return text;
}

std::vector<float> ramp(float start) {
  std::vector<float> values(kCount);
  for (size_t i = 0; i < kCount; ++i) values[i] = start + static_cast<float>(i);
  return values;
}

class CudaGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Before the first Chorus call of the process; later tests find the driver already open.
    setenv(kCudaDriverLibraryEnv, kFakeDriver, 1);
    fake_ = fakeDriver();
    ASSERT_NE(fake_.deviceMemory, nullptr) << kFakeDriver << ": " << dlerror();
    ASSERT_NE(fake_.managedMemory, nullptr);
    ASSERT_NE(fake_.managedDeviceMemory, nullptr);
    ASSERT_NE(fake_.cuInitCalls, nullptr);
    // With a real GPU the fake's "device memory" would be handed to the CUDA executor.
    std::string why;
    if (gpuExecutorAvailable(&why)) GTEST_SKIP() << "a GPU is present: the fake driver's refusals do not apply";
    ASSERT_EQ(ncclCommInitAll(&comm_, 1, nullptr), ncclSuccess);
  }
  void TearDown() override {
    if (comm_ != nullptr) {
      EXPECT_EQ(ncclCommDestroy(comm_), ncclSuccess);
    }
  }

  // Expects `result` to be the device-buffer refusal of `func` for `arg` at `ptr`.
  void expectRefused(ncclResult_t result, const char* func, const char* arg, const void* ptr) {
    EXPECT_EQ(result, ncclInvalidArgument) << func << " " << arg;
    const std::string error = ncclGetLastError(comm_);
    EXPECT_NE(error.find(func), std::string::npos) << error;
    EXPECT_NE(error.find(std::string(arg) + " " + addressText(ptr)), std::string::npos) << error;
    EXPECT_NE(error.find("device memory of GPU 3"), std::string::npos) << error;
    EXPECT_NE(error.find("CPU executor"), std::string::npos) << error;
  }

  FakeDriver fake_;
  ncclComm_t comm_ = nullptr;
};

TEST_F(CudaGuardTest, ClassifyPointerSeesTheFakeDevicesMemory) {
  ASSERT_NE(cudaDriverApi(), nullptr) << "the fake driver was not loaded";
  PointerKind first = classifyPointer(fake_.deviceMemory);
  EXPECT_TRUE(first.device);
  EXPECT_EQ(first.ordinal, 3);
  PointerKind last = classifyPointer(fake_.deviceMemory + 4095);
  EXPECT_TRUE(last.device);
  EXPECT_EQ(last.ordinal, 3);

  EXPECT_FALSE(classifyPointer(fake_.managedMemory).device) << "managed memory is host-accessible";
  EXPECT_FALSE(classifyPointer(fake_.managedMemory + 4095).device);
  EXPECT_FALSE(classifyPointer(fake_.managedDeviceMemory).device) << "managed memory the driver calls device memory";
  std::vector<float> heap(kCount);
  EXPECT_FALSE(classifyPointer(heap.data()).device) << "a pointer the driver does not know is host memory";
  float stack = 0;
  EXPECT_FALSE(classifyPointer(&stack).device);
  EXPECT_FALSE(classifyPointer(nullptr).device);
}

TEST_F(CudaGuardTest, DriverIsInitializedOnceAcrossThreads) {
  std::vector<std::thread> threads;
  std::vector<int> device(8, 0);
  for (size_t t = 0; t < device.size(); ++t) {
    threads.emplace_back([&, t] { device[t] = classifyPointer(fake_.deviceMemory + t).device ? 1 : 0; });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < device.size(); ++t) EXPECT_EQ(device[t], 1) << "thread " << t;
  EXPECT_EQ(__atomic_load_n(fake_.cuInitCalls, __ATOMIC_RELAXED), 1);
}

TEST(CudaDriverLoad, NamesTheMissingLibraryAndTheMissingFunction) {
  CudaDriverApi api;
  std::string why;
  EXPECT_FALSE(loadCudaDriverApi(kMissingDriver, &api, &why));
  EXPECT_NE(why.find(kMissingDriver), std::string::npos) << why;
  EXPECT_EQ(api.library, nullptr);

  why.clear();
  EXPECT_FALSE(loadCudaDriverApi("libm.so.6", &api, &why));
  EXPECT_NE(why.find("cuInit not found in libm.so.6"), std::string::npos) << why;
  EXPECT_EQ(api.init, nullptr);
  EXPECT_EQ(api.library, nullptr) << "a failed load keeps nothing open";

  ASSERT_TRUE(loadCudaDriverApi(kFakeDriver, &api, &why)) << why;
  EXPECT_NE(api.init, nullptr);
  EXPECT_NE(api.pointerGetAttribute, nullptr);
}

TEST_F(CudaGuardTest, AllReduceRefusesDeviceSendbuffAndLeavesRecvbuffAlone) {
  auto* device = reinterpret_cast<float*>(fake_.deviceMemory);
  std::vector<float> recv(kCount, -1.0f);
  expectRefused(ncclAllReduce(device, recv.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr), "ncclAllReduce",
                "sendbuff", device);
  EXPECT_EQ(recv, std::vector<float>(kCount, -1.0f)) << "a refused call must not run";
}

TEST_F(CudaGuardTest, AllReduceRefusesDeviceRecvbuffAndLeavesItAlone) {
  auto* device = reinterpret_cast<float*>(fake_.deviceMemory);
  std::fill(device, device + kCount, -1.0f);
  const std::vector<float> send = ramp(1.0f);
  expectRefused(ncclAllReduce(send.data(), device, kCount, ncclFloat32, ncclSum, comm_, nullptr), "ncclAllReduce",
                "recvbuff", device);
  EXPECT_EQ(std::vector<float>(device, device + kCount), std::vector<float>(kCount, -1.0f));
}

TEST_F(CudaGuardTest, RefusalsSayWhichExecutorAndWhy) {
  auto* device = reinterpret_cast<float*>(fake_.deviceMemory);
  EXPECT_EQ(ncclAllReduce(device, device + kCount, kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclInvalidArgument);
  std::string error = ncclGetLastError(comm_);
  EXPECT_NE(error.find("the CUDA executor cannot run here ("), std::string::npos) << error;

  // Without a usable GPU it was a CPU communicator from init, and stays one.
  chorusExecutor_t executor = chorusExecutorAuto;
  ASSERT_EQ(chorusCommGetExecutor(comm_, &executor), ncclSuccess);
  EXPECT_EQ(executor, chorusExecutorCpu);
  std::vector<float> send = ramp(1.0f), recv(kCount, 0.0f);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(send.data(), device, kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclInvalidArgument);
  error = ncclGetLastError(comm_);
  EXPECT_NE(error.find("the CUDA executor cannot run here ("), std::string::npos) << error;
}

TEST_F(CudaGuardTest, AGpuCommunicatorAskedForWhereNoneCanRunIsRefusedAtInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(chorusCommInitRankExecutor(&comm, 1, id, 0, nullptr, chorusExecutorGpu), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  std::string error = ncclGetLastError(nullptr);
  EXPECT_NE(error.find("chorusCommInitRankExecutor asks for a GPU communicator"), std::string::npos) << error;
  EXPECT_NE(error.find("the CUDA executor cannot run here ("), std::string::npos) << error;

  setenv("CHORUS_EXECUTOR", "gpu", 1);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidUsage);
  error = ncclGetLastError(nullptr);
  EXPECT_NE(error.find("CHORUS_EXECUTOR=gpu asks for a GPU communicator"), std::string::npos) << error;
  setenv("CHORUS_EXECUTOR", "gpus", 1);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
  error = ncclGetLastError(nullptr);
  EXPECT_NE(error.find("CHORUS_EXECUTOR=gpus is not one of auto, cpu, gpu"), std::string::npos) << error;
  unsetenv("CHORUS_EXECUTOR");
  EXPECT_EQ(chorusCommInitRankExecutor(&comm, 1, id, 0, nullptr, static_cast<chorusExecutor_t>(7)),
            ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
}

TEST_F(CudaGuardTest, EveryCollectiveRefusesDeviceBuffers) {
  auto* device = reinterpret_cast<float*>(fake_.deviceMemory);
  std::vector<float> host(kCount, 0.0f);
  expectRefused(ncclBroadcast(device, host.data(), kCount, ncclFloat32, 0, comm_, nullptr), "ncclBroadcast", "sendbuff",
                device);
  expectRefused(ncclBcast(device, kCount, ncclFloat32, 0, comm_, nullptr), "ncclBcast", "sendbuff", device);
  expectRefused(ncclReduce(host.data(), device, kCount, ncclFloat32, ncclSum, 0, comm_, nullptr), "ncclReduce",
                "recvbuff", device);
  expectRefused(ncclAllGather(host.data(), device, kCount, ncclFloat32, comm_, nullptr), "ncclAllGather", "recvbuff",
                device);
  expectRefused(ncclReduceScatter(device, host.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr),
                "ncclReduceScatter", "sendbuff", device);
  expectRefused(ncclAlltoAll(device, host.data(), kCount, ncclFloat32, comm_, nullptr), "ncclAlltoAll", "sendbuff",
                device);
  expectRefused(ncclGather(host.data(), device, kCount, ncclFloat32, 0, comm_, nullptr), "ncclGather", "recvbuff",
                device);
  // An offset into the allocation is device memory too.
  expectRefused(ncclAllReduce(host.data(), device + 3, kCount, ncclFloat32, ncclSum, comm_, nullptr), "ncclAllReduce",
                "recvbuff", device + 3);
}

TEST_F(CudaGuardTest, ManagedAndHeapBuffersWorkAfterARefusal) {
  auto* device = reinterpret_cast<float*>(fake_.deviceMemory);
  std::vector<float> heapSend = ramp(1.0f), heapRecv(kCount, 0.0f);
  ASSERT_EQ(ncclAllReduce(device, heapRecv.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclInvalidArgument);

  ASSERT_EQ(ncclAllReduce(heapSend.data(), heapRecv.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclSuccess)
      << ncclGetLastError(comm_);
  EXPECT_EQ(heapRecv, heapSend);  // one rank: the sum is the input

  auto* managed = reinterpret_cast<float*>(fake_.managedMemory);
  const std::vector<float> managedInput = ramp(100.0f);
  std::copy(managedInput.begin(), managedInput.end(), managed);
  auto* managedRecv = managed + kCount;
  std::fill(managedRecv, managedRecv + kCount, 0.0f);
  ASSERT_EQ(ncclAllReduce(managed, managedRecv, kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclSuccess)
      << ncclGetLastError(comm_);
  EXPECT_EQ(std::vector<float>(managedRecv, managedRecv + kCount), managedInput);

  std::fill(heapRecv.begin(), heapRecv.end(), 0.0f);
  ASSERT_EQ(ncclAllReduce(managed, heapRecv.data(), kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclSuccess)
      << ncclGetLastError(comm_);
  EXPECT_EQ(heapRecv, managedInput);

  auto* managedDevice = reinterpret_cast<float*>(fake_.managedDeviceMemory);
  std::fill(managedDevice, managedDevice + kCount, 0.0f);
  ASSERT_EQ(ncclAllReduce(heapSend.data(), managedDevice, kCount, ncclFloat32, ncclSum, comm_, nullptr), ncclSuccess)
      << ncclGetLastError(comm_);
  EXPECT_EQ(std::vector<float>(managedDevice, managedDevice + kCount), heapSend);
}

// Runs `body` in a freshly started copy of this test program (gtest's "threadsafe" death
// tests re-execute it), so the process-wide driver is opened with the environment `body`
// sets. `body` returns the first problem it found, empty when none.
template <typename Body>
void expectCleanRunInFreshProcess(Body body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string problem = body();
        if (!problem.empty()) fprintf(stderr, "%s\n", problem.c_str());
        fflush(stderr);
        std::_Exit(problem.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// An INIT-level debug log into a file of this process, removed when this goes away.
class InitLogFile {
 public:
  InitLogFile() : path_(::testing::TempDir() + "chorus-cuda-guard-" + std::to_string(getpid()) + ".log") {
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT", 1);
    setenv("NCCL_DEBUG_FILE", (::testing::TempDir() + "chorus-cuda-guard-%p.log").c_str(), 1);
  }
  ~InitLogFile() { std::remove(path_.c_str()); }
  InitLogFile(const InitLogFile&) = delete;
  InitLogFile& operator=(const InitLogFile&) = delete;

  // The first line mentioning `text`, or empty.
  std::string lineWith(const std::string& text) const {
    std::ifstream file(path_);
    std::string line;
    while (std::getline(file, line)) {
      if (line.find(text) != std::string::npos) return line;
    }
    return "";
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One-rank AllReduce of heap buffers; empty when the result is right.
std::string heapAllReduceProblem() {
  ncclComm_t comm = nullptr;
  if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return "ncclCommInitAll failed";
  std::vector<float> send = ramp(7.0f), recv(kCount, 0.0f);
  ncclResult_t result = ncclAllReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
  std::string problem;
  if (result != ncclSuccess) {
    problem = std::string("ncclAllReduce on heap buffers returned ") + ncclGetErrorString(result) + ": " +
              ncclGetLastError(comm);
  } else if (recv != send) {
    problem = "ncclAllReduce on heap buffers gave a wrong result";
  }
  if (ncclCommDestroy(comm) != ncclSuccess && problem.empty()) problem = "ncclCommDestroy failed";
  return problem;
}

TEST(CudaGuardDriverAbsentDeathTest, HeapBuffersWorkAndOneInfoLineSaysWhy) {
  expectCleanRunInFreshProcess([]() -> std::string {
    setenv(kCudaDriverLibraryEnv, kMissingDriver, 1);
    const InitLogFile log;
    if (cudaDriverApi() != nullptr) return "a driver was loaded from a nonexistent path";
    std::vector<float> heap(kCount);
    if (classifyPointer(heap.data()).device) return "heap memory classified as device memory";
    if (std::string problem = heapAllReduceProblem(); !problem.empty()) return problem;
    const std::string line = log.lineWith("CUDA driver absent");
    if (line.empty()) return "no INFO line on the absent driver in " + log.path();
    if (line.find(" INFO ") == std::string::npos) return "the absent driver is not an INFO line: " + line;
    if (line.find(kMissingDriver) == std::string::npos) return "the INFO line does not name the library: " + line;
    return "";
  });
}

TEST(CudaGuardCuInitFailsDeathTest, DriverCountsAsAbsent) {
  expectCleanRunInFreshProcess([]() -> std::string {
    setenv(kCudaDriverLibraryEnv, kFakeDriver, 1);
    setenv("FAKE_CUDA_INIT_RESULT", "100", 1);  // CUDA_ERROR_NO_DEVICE
    const InitLogFile log;
    if (cudaDriverApi() != nullptr) return "the driver counts as present although cuInit failed";
    FakeDriver fake = fakeDriver();
    if (fake.deviceMemory == nullptr) return std::string("fake driver not found: ") + kFakeDriver;
    if (classifyPointer(fake.deviceMemory).device) return "without an initialized driver every pointer is host";
    if (std::string problem = heapAllReduceProblem(); !problem.empty()) return problem;
    const std::string line = log.lineWith("cuInit(0)");
    if (line.find("returned 100") == std::string::npos || line.find(" INFO ") == std::string::npos) {
      return "no INFO line naming cuInit's result: '" + line + "'";
    }
    return "";
  });
}

}  // namespace
}  // namespace chorus
