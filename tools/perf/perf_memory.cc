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

void useDeviceOf(int localRank, int perProcess) {
#ifdef CHORUS_PERF_CUDA
  if (!deviceBuffers()) return;
  int process = 0;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) {
      process = std::atoi(value);
      break;
    }
  }
  check(cudaSetDevice((process * perProcess + localRank) % gpuCount()), "cudaSetDevice");
#else
  (void)localRank;
  (void)perProcess;
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

void copyBytes(void* to, const void* from, size_t bytes, cudaStream_t stream) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) {  // either direction: cudaMemcpyDefault tells from the addresses
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    return syncStream(stream);
  }
#endif
  (void)stream;
  std::memcpy(to, from, bytes);
}

void fillBuffer(void* buffer, int byte, size_t bytes, cudaStream_t stream) {
#ifdef CHORUS_PERF_CUDA
  if (deviceBuffers()) {
    check(cudaMemsetAsync(buffer, byte, bytes, stream), "cudaMemsetAsync");
    return syncStream(stream);
  }
#endif
  (void)stream;
  std::memset(buffer, byte, bytes);
}

}  // namespace chorus::perf
