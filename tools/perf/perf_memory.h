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

// Makes the calling thread use the GPU of this process's rank `localRank` (of `perProcess`),
// for its ncclCommInitRank and ncclMemAlloc: as nccl-tests, GPU (node-local process index
// × perProcess + localRank) % GPUs, the node-local index read from the launcher's
// environment (Open MPI, MPICH, Slurm, torchrun), else 0. Nothing with host buffers.
void useDeviceOf(int localRank, int perProcess);

// The rank's stream (nullptr with host buffers), and waiting for what was enqueued on it.
cudaStream_t createStream();
void destroyStream(cudaStream_t stream);
void syncStream(cudaStream_t stream);

// Host <-> buffer copies and fills, whichever memory the buffers are, done when they
// return. On the rank's own stream: the collectives run there, and a copy on the legacy
// stream would not be ordered with them.
void copyBytes(void* to, const void* from, size_t bytes, cudaStream_t stream);
void fillBuffer(void* buffer, int byte, size_t bytes, cudaStream_t stream);

}  // namespace chorus::perf
