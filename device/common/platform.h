// The one place where device/common learns which compiler builds it.
// Everything else in device/common is written once for both executors.
#pragma once

#if defined(__CUDACC__)
// Inline (not forced) on the GPU as well: forcing it made one kernel take minutes.
#define CHORUS_HD __host__ __device__ inline
// Kept out of line on the GPU: the primitives' steps and the algorithms, called from
// many places per kernel. Inlining each call site multiplied a kernel's code tenfold
// (4.5 MB of SASS per type and op, 2.5 minutes of nvcc) for calls made once per step.
#define CHORUS_HD_OUTLINE __host__ __device__ inline __noinline__
// A short loop of constant trip count unrolled, so that its array stays in registers. In
// nvcc's device pass only: its host pass hands the code to the host compiler, which does
// not know the pragma (-Wunknown-pragmas).
#if defined(__CUDA_ARCH__)
#define CHORUS_UNROLL _Pragma("unroll")
#else
#define CHORUS_UNROLL
#endif
#else
// Plain inline on the host: forcing every primitive and loop inline copied the
// reduction loops into each of thousands of instantiations (minutes of compile time
// per protocol) for no measurable gain.
#define CHORUS_HD inline
#define CHORUS_HD_OUTLINE inline
#define CHORUS_UNROLL
#endif

#include <cstddef>
#include <cstdint>

namespace chorus {

// Copies `bytes` (a multiple of 8) between 8-byte-aligned buffers. nvcc lowers a memcpy it
// cannot prove aligned to one load and one store per byte, and does not take
// __builtin_assume_aligned as proof for a long copy; for an 8-byte one it does, so the GPU
// copies word by word. The host compiler's memcpy already moves 16 bytes at a time.
CHORUS_HD void copyAlignedWords(void* dst, const void* src, size_t bytes) {
#if defined(__CUDA_ARCH__)
  for (size_t i = 0; i < bytes; i += sizeof(uint64_t)) {
    uint64_t word;  // through memcpy: the buffers may hold any type
    __builtin_memcpy(&word, __builtin_assume_aligned(static_cast<const char*>(src) + i, 8), sizeof(word));
    __builtin_memcpy(__builtin_assume_aligned(static_cast<char*>(dst) + i, 8), &word, sizeof(word));
  }
#else
  __builtin_memcpy(dst, src, bytes);
#endif
}

}  // namespace chorus
