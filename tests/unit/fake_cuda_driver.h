// The fake CUDA driver (fake_cuda_driver.c) as the tests reach it: its exported arrays
// and counter, through the same (reference-counted) handle Chorus opens, so the addresses
// are the ones the fake recognizes. CHORUS_CUDA_DRIVER_LIBRARY must name it before the
// first Chorus call of the process.
#pragma once

#include <dlfcn.h>

#ifndef CHORUS_FAKE_CUDA_DRIVER
#error "CHORUS_FAKE_CUDA_DRIVER must name the built fake driver (tests/CMakeLists.txt)"
#endif

namespace chorus {
namespace fixtures {

inline constexpr const char* kFakeDriver = CHORUS_FAKE_CUDA_DRIVER;
inline constexpr int kFakeDeviceOrdinal = 3;  // the GPU the fake's device memory is on

struct FakeDriver {
  char* deviceMemory = nullptr;         // 16 KiB of "device memory of GPU 3"
  char* managedMemory = nullptr;        // reported as host memory
  char* managedDeviceMemory = nullptr;  // reported as device memory, as real drivers do
  int* cuInitCalls = nullptr;
};

inline FakeDriver fakeDriver() {
  static void* handle = dlopen(kFakeDriver, RTLD_NOW | RTLD_LOCAL);
  FakeDriver fake;
  if (handle == nullptr) return fake;
  fake.deviceMemory = static_cast<char*>(dlsym(handle, "fakeDeviceMemory"));
  fake.managedMemory = static_cast<char*>(dlsym(handle, "fakeManagedMemory"));
  fake.managedDeviceMemory = static_cast<char*>(dlsym(handle, "fakeManagedDeviceMemory"));
  fake.cuInitCalls = static_cast<int*>(dlsym(handle, "fakeCuInitCalls"));
  return fake;
}

}  // namespace fixtures
}  // namespace chorus
