// Where the perf tools' buffers live and how the host reaches them. nccl-tests puts every
// rank on a GPU, with device buffers and a stream of its own; Chorus' tools do the same
// where a GPU is present and they were built with CUDA (unless CHORUS_PERF_MEMORY=host),
// and otherwise use host memory (ncclMemAlloc gives host memory where there is no GPU).
#pragma once

#include <cstddef>

#include "nccl.h"

namespace chorus::perf {

// Decided once per process.
bool deviceBuffers();
// What the table header says about rank `localRank`'s memory ("[cpu] host memory", ...).
const char* memoryText();

// Makes the calling thread use local rank `localRank`'s GPU (local rank % GPUs), for its
// ncclCommInitRank and ncclMemAlloc; nothing with host buffers.
void useDeviceOf(int localRank);

// The rank's stream (nullptr with host buffers), and waiting for what was enqueued on it.
cudaStream_t createStream();
void destroyStream(cudaStream_t stream);
void syncStream(cudaStream_t stream);

// Host <-> buffer copies and fills, whichever memory the buffers are.
void copyToBuffer(void* buffer, const void* host, size_t bytes);
void copyFromBuffer(void* host, const void* buffer, size_t bytes);
void fillBuffer(void* buffer, int byte, size_t bytes);

}  // namespace chorus::perf
