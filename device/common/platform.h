// The one place where device/common learns which compiler builds it.
// Everything else in device/common is written once for both executors.
#pragma once

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__ __forceinline__
#else
// Plain inline on the host: forcing every primitive and loop inline copied the
// reduction loops into each of thousands of instantiations (minutes of compile time
// per protocol) for no measurable gain.
#define CHORUS_HD inline
#endif
