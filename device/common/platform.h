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
#else
// Plain inline on the host: forcing every primitive and loop inline copied the
// reduction loops into each of thousands of instantiations (minutes of compile time
// per protocol) for no measurable gain.
#define CHORUS_HD inline
#define CHORUS_HD_OUTLINE inline
#endif
