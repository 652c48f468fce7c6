// The CUDA driver (libcuda.so.1), opened at run time so libnccl.so.2 does not depend on it
// and no cuda.h is needed to build: Chorus asks it where a user's buffer lives. Without
// the library, or when cuInit fails, the driver is absent (one INFO line, never an error)
// and every pointer is host memory. CHORUS_CUDA_DRIVER_LIBRARY names another library
// (the tests' fake driver). The types below are the few of NVIDIA's documented ABI that
// the calls in the table take.
#pragma once

#include <memory>
#include <string>

namespace chorus {

inline constexpr const char* kCudaDriverLibrary = "libcuda.so.1";
inline constexpr const char* kCudaDriverLibraryEnv = "CHORUS_CUDA_DRIVER_LIBRARY";

namespace cu {
using Result = int;                    // CUresult
using DevicePtr = unsigned long long;  // CUdeviceptr (64-bit)
inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidValue = 1;  // cuPointerGetAttribute: not a pointer the driver knows
// CUpointer_attribute
inline constexpr int kPointerAttributeMemoryType = 2;
inline constexpr int kPointerAttributeIsManaged = 8;
inline constexpr int kPointerAttributeDeviceOrdinal = 9;
// CUmemorytype
inline constexpr unsigned kMemoryTypeHost = 1;
inline constexpr unsigned kMemoryTypeDevice = 2;
}  // namespace cu

struct CudaDriverApi {
  cu::Result (*init)(unsigned flags) = nullptr;  // cuInit
  cu::Result (*pointerGetAttribute)(void* data, int attribute, cu::DevicePtr ptr) = nullptr;

  // Keeps the library loaded while this table is alive (dlclose on destruction).
  std::shared_ptr<void> library;
};

// The process-wide table: on the first call (thread-safe, once) opens the library named by
// CHORUS_CUDA_DRIVER_LIBRARY, else libcuda.so.1, and calls cuInit(0). Null when the driver
// is absent; the INFO line saying why is printed once.
const CudaDriverApi* cudaDriverApi();

// Loads `library` into `*api` without calling cuInit or caching: the work behind
// cudaDriverApi(), and a test hook for the failure paths. False with `*why` naming the cause.
bool loadCudaDriverApi(const char* library, CudaDriverApi* api, std::string* why);

// Where a buffer lives, as far as the executors care.
// Eight bytes, the int first: returned in one register, not assembled on the stack byte by
// byte (a stall on every call's buffer check).
struct PointerKind {
  int ordinal = -1;     // the GPU holding it when `device`; -1 when the driver does not say
  bool device = false;  // device memory the host cannot access (managed memory is host-accessible)
  // The driver knows it: device, managed, or pinned/registered host memory; a GPU can
  // reach it. Plain pageable host memory is not.
  bool gpuReachable = false;
};

// Classifies `ptr` with the process-wide driver; host memory when the driver is absent.
PointerKind classifyPointer(const void* ptr);

// Classifies `ptr` with `api` (loaded and initialized). A pointer the driver does not know
// (plain malloc memory: CUDA_ERROR_INVALID_VALUE), or any other driver failure, is host memory.
PointerKind classifyPointer(const CudaDriverApi& api, const void* ptr);

}  // namespace chorus
