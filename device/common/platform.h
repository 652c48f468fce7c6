// The one place where device/common learns which compiler builds it.
// Everything else in device/common is written once for both executors.
#pragma once

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__ __forceinline__
#else
#define CHORUS_HD inline __attribute__((always_inline))
#endif
