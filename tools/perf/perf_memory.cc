#include "perf_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef CHORUS_PERF_CUDA
#include <cuda_runtime.h>
#endif

namespace chorus::perf {
namespace {

#ifdef CHORUS_PERF_CUDA
int gpuCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

void check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "perf: %s failed: %s\n", call, cudaGetErrorString(err));
  std::exit(1);
}
#endif

}  // namespace

bool deviceBuffers() {
#ifdef CHORUS_PERF_CUDA
  static const bool device = [] {
    const char* mode = std::getenv("CHORUS_PERF_MEMORY");
    return gpuCount() > 0 && !(mode && std::strcmp(mode, "host") == 0);
  }();
  return device;
#else
  return false;
#endif
}

const char* memoryText() { return deviceBuffers() ? "[gpu] device memory" : "[cpu] host memory"; }

void useDeviceOf(int localRank) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) check(cudaSetDevice(localRank % gpuCount()), "cudaSetDevice");
#else
  (void)localRank;
#endif
}

cudaStream_t createStream() {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return stream;
  }
#endif
  return nullptr;
}

void destroyStream(cudaStream_t stream) {
#ifdef CHORUS_PERF_CUDA
  if (stream) cudaStreamDestroy(stream);
#else
  (void)stream;
#endif
}

void syncStream(cudaStream_t stream) {
#ifdef CHORUS_PERF_CUDA
  if (stream) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
#else
  (void)stream;
#endif
}

void copyToBuffer(void* buffer, const void* host, size_t bytes) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) return check(cudaMemcpy(buffer, host, bytes, cudaMemcpyDefault), "cudaMemcpy");
#endif
  std::memcpy(buffer, host, bytes);
}

void copyFromBuffer(void* host, const void* buffer, size_t bytes) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) return check(cudaMemcpy(host, buffer, bytes, cudaMemcpyDefault), "cudaMemcpy");
#endif
  std::memcpy(host, buffer, bytes);
}

void fillBuffer(void* buffer, int byte, size_t bytes) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) return check(cudaMemset(buffer, byte, bytes), "cudaMemset");
#endif
  std::memset(buffer, byte, bytes);
}

}  // namespace chorus::perf
