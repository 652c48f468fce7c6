#include "core/cuda_driver_api.h"

#include <cstdint>

#include "core/debug.h"
#include "core/env.h"
#include "core/shared_library.h"

namespace chorus {

namespace {

// The driver named by the environment, loaded and initialized; null (with one INFO line
// saying why) when it is absent.
std::unique_ptr<CudaDriverApi> openCudaDriver() {
  const std::string library = envString(kCudaDriverLibraryEnv, kCudaDriverLibrary);
  auto api = std::make_unique<CudaDriverApi>();
  std::string why;
  if (!loadCudaDriverApi(library.c_str(), api.get(), &why)) {
    INFO(kSubsysInit, "CUDA driver absent: %s; every buffer is treated as host memory", why.c_str());
    return nullptr;
  }
  if (cu::Result result = api->init(0); result != cu::kSuccess) {
    INFO(kSubsysInit, "CUDA driver absent: cuInit(0) from %s returned %d; every buffer is treated as host memory",
         library.c_str(), result);
    return nullptr;
  }
  INFO(kSubsysInit, "CUDA driver %s loaded: collectives refuse device buffers (CPU executor only)", library.c_str());
  return api;
}

}  // namespace

bool loadCudaDriverApi(const char* library, CudaDriverApi* api, std::string* why) {
  *api = CudaDriverApi{};
  SharedLibrary lib;
  if (!lib.open(library, why)) return false;
  api->library = lib.handle();
  bool ok =
      lib.resolve("cuInit", &api->init, why) && lib.resolve("cuPointerGetAttribute", &api->pointerGetAttribute, why);
  if (!ok) *api = CudaDriverApi{};
  return ok;
}

const CudaDriverApi* cudaDriverApi() {
  // Opened once and never closed, as NCCL keeps libcuda: a thread still validating a call
  // while the process exits must not find the library unloaded under it.
  static const CudaDriverApi* const api = openCudaDriver().release();
  return api;
}

PointerKind classifyPointer(const void* ptr) {
  const CudaDriverApi* api = cudaDriverApi();
  if (api == nullptr || ptr == nullptr) return PointerKind{};
  return classifyPointer(*api, ptr);
}

PointerKind classifyPointer(const CudaDriverApi& api, const void* ptr) {
  const auto address = static_cast<cu::DevicePtr>(reinterpret_cast<uintptr_t>(ptr));
  unsigned memoryType = 0;
  if (api.pointerGetAttribute(&memoryType, cu::kPointerAttributeMemoryType, address) != cu::kSuccess) {
    return PointerKind{};
  }
  PointerKind kind;
  kind.gpuReachable = true;
  if (memoryType != cu::kMemoryTypeDevice) return kind;
  // The driver calls managed memory "device" memory, yet the host may read and write it.
  unsigned isManaged = 0;
  if (api.pointerGetAttribute(&isManaged, cu::kPointerAttributeIsManaged, address) == cu::kSuccess && isManaged) {
    return kind;
  }
  kind.device = true;
  int ordinal = -1;
  if (api.pointerGetAttribute(&ordinal, cu::kPointerAttributeDeviceOrdinal, address) == cu::kSuccess) {
    kind.ordinal = ordinal;
  }
  return kind;
}

}  // namespace chorus
