// What the host passes to a collective kernel, and what the kernel reports back.
// Plain structs, compiled by the host compiler and by nvcc alike: the host runtime
// fills them, device/cuda reads them.
//
// Every pointer here must be dereferenceable by the GPU: device memory, or host
// memory that is pinned and mapped (cudaHostAlloc/cudaHostRegister) — FIFOs, work
// items, the abort flag and the status all qualify as long as they live there.
#pragma once

#include <cstdint>

#include "device/common/work.h"

namespace chorus {

// The first failure of a launch, written by the GPU (first writer wins on `code`) and
// read by the host once the launch has completed.
// Threads per block: a team per lane (channel). NCCL uses 512 to 640 for large work.
constexpr int kCudaThreadsPerLane = 512;

struct KernelStatus {
  int claim = 0;   // the first failing thread takes it (atomicCAS), then fills in the rest
  int code = 0;    // ncclResult_t; 0: no failure. Written last, so a nonzero code has its fields
  int peer = -1;   // the rank at the other end of the connection involved, if any
  int block = -1;  // the lane (block) that failed
  long got = 0;    // for malformed steps: what was seen and what was expected
  long expected = 0;
  char what[96] = {};  // the cause, NUL-terminated
};

// One lane: the work items one thread block runs in order.
struct KernelLane {
  const WorkItem* items = nullptr;
  int nItems = 0;
};

struct KernelArgs {
  CommView comm;                        // its channels and FifoEnds in GPU-visible memory
  const KernelLane* lanes = nullptr;    // one per block
  KernelStatus* status = nullptr;       // GPU-visible, zeroed before the launch
  const uint32_t* abortFlag = nullptr;  // nonzero: stop waiting (host-mapped)
  uint64_t timeoutNs = 0;               // 0: no timeout; else the longest wait without progress
};

}  // namespace chorus
