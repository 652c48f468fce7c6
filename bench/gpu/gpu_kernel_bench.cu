// The CUDA executor's kernel benchmarks, on one GPU:
//  1. reduce-copy bandwidth: device/common's teamReduce (the loop every reducing
//     primitive runs) over the whole GPU as one team, next to cudaMemcpy's device-to-
//     device copy and teamCopy, in the same run; memory traffic / time, and the ratio;
//  2. 8-byte AllReduce latency, 2 ranks sharing the GPU (each rank a kernel on its own
//     stream, FIFOs in device memory), per protocol: launch + completion, per call.
// Usage: gpu_kernel_bench [MiB per array, default 256] [latency iterations, default 200]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/common/reduce_ops.h"
#include "device/common/team_ops.h"
#include "device_ranks.h"
#include "work_item_fixture.h"

namespace chorus {
namespace {

// The whole grid as one team: thread t of the grid takes packs t, t + N, ...
struct GridTeam {
  static constexpr bool kTeamOfOne = false;
  __host__ __device__ int tid() const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int nthreads() const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(gridDim.x * blockDim.x);
#else
    return 1;
#endif
  }
};

__global__ void reduceKernel(float* dst, const float* a, const float* b, size_t n) {
  teamReduce(GridTeam{}, dst, a, b, n, RedOp<float, RedKind::Sum>{0.f, 1}, false, false, false);
}
__global__ void copyKernel(float* dst, const float* src, size_t n) {
  teamCopy(GridTeam{}, dst, src, n, RedOp<float, RedKind::Sum>{0.f, 1}, false, false);
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_kernel_bench: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

template <typename Launch>
double timeMs(Launch&& launch, int iters) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  launch();  // warm-up
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) launch();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

int bandwidth(size_t mib) {
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  const size_t bytes = n * sizeof(float);
  float *a, *b, *dst;
  if (!check(cudaMalloc(&a, bytes), "cudaMalloc") || !check(cudaMalloc(&b, bytes), "cudaMalloc") ||
      !check(cudaMalloc(&dst, bytes), "cudaMalloc"))
    return 1;
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int blocks = sms * 4, threads = 512;
  const int iters = 20;
  const double memcpyMs = timeMs([&] { cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice); }, iters);
  const double copyMs = timeMs([&] { copyKernel<<<blocks, threads>>>(dst, a, n); }, iters);
  const double reduceMs = timeMs([&] { reduceKernel<<<blocks, threads>>>(dst, a, b, n); }, iters);
  if (!check(cudaGetLastError(), "kernel launch")) return 1;
  const double memcpyGBs = 2.0 * bytes / (memcpyMs * 1e6);
  const double copyGBs = 2.0 * bytes / (copyMs * 1e6);
  const double reduceGBs = 3.0 * bytes / (reduceMs * 1e6);
  std::printf("# reduce-copy bandwidth, %zu MiB per array, %d blocks x %d threads, float sum\n", mib, blocks, threads);
  std::printf("%-28s %10s %12s %10s\n", "operation", "time(ms)", "traffic GB/s", "vs memcpy");
  std::printf("%-28s %10.3f %12.1f %10.2f\n", "cudaMemcpy device-to-device", memcpyMs, memcpyGBs, 1.0);
  std::printf("%-28s %10.3f %12.1f %10.2f\n", "teamCopy kernel", copyMs, copyGBs, copyGBs / memcpyGBs);
  std::printf("%-28s %10.3f %12.1f %10.2f\n", "teamReduce kernel (a+b)", reduceMs, reduceGBs, reduceGBs / memcpyGBs);
  cudaFree(a);
  cudaFree(b);
  cudaFree(dst);
  return 0;
}

int latency(int iters) {
  using gpu_test::DeviceBuffer;
  using gpu_test::DeviceRanks;
  FifoLayout layout;
  layout.slotBytes[static_cast<int>(Protocol::LL)] = 16 * 1024;
  layout.slotBytes[static_cast<int>(Protocol::LL128)] = 128 * 1024;
  layout.slotBytes[static_cast<int>(Protocol::Simple)] = 512 * 1024;
  std::printf("# 8-byte AllReduce (2 x float), 2 ranks sharing the GPU, ring, one kernel per rank per call\n");
  std::printf("%-8s %14s\n", "protocol", "us per call");
  const char* names[] = {"LL", "LL128", "Simple"};
  for (Protocol proto : {Protocol::LL, Protocol::LL128, Protocol::Simple}) {
    DeviceRanks ranks(2, layout);
    DeviceBuffer send0(8), send1(8), recv0(8), recv1(8);
    const std::vector<WorkItem> items = {fixtures::wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, proto,
                                                                 ncclFloat32, send0.get(), recv0.get(), 2, 0),
                                         fixtures::wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, proto,
                                                                 ncclFloat32, send1.get(), recv1.get(), 2, 0)};
    if (!ranks.run(items, RedKind::Sum)) return 1;  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      if (!ranks.run(items, RedKind::Sum)) return 1;
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-8s %14.1f\n", names[static_cast<int>(proto)], us / iters);
  }
  std::printf("# each call includes two launches, mapped-memory status setup and a host poll of both streams\n");
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  const std::string why = chorus::gpu_test::gpuUnavailableReason();
  if (!why.empty()) {
    std::printf("gpu_kernel_bench: skipped: %s\n", why.c_str());
    return 77;
  }
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  if (mib == 0 || iters <= 0) {
    std::fprintf(stderr, "usage: gpu_kernel_bench [MiB per array > 0] [latency iterations > 0]\n");
    return 2;
  }
  const int rc = chorus::bandwidth(mib);
  return rc != 0 ? rc : chorus::latency(iters);
}
