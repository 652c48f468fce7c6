/* A stand-in for libcuda.so.1 with the two functions Chorus calls, loaded through
 * CHORUS_CUDA_DRIVER_LIBRARY by cuda_guard_test: it knows one "device" allocation on
 * GPU 3 and one "managed" allocation, and no other pointer, so the device-buffer guard
 * can be tested on a machine without a GPU. Numbers as in cuda.h. */
#include <stdint.h>
#include <stdlib.h>

enum { kSuccess = 0, kErrorInvalidValue = 1 };
enum { kAttrMemoryType = 2, kAttrIsManaged = 8, kAttrDeviceOrdinal = 9 };
enum { kMemoryTypeHost = 1, kMemoryTypeDevice = 2 };
enum { kFakeDeviceOrdinal = 3 };

/* Host memory the fake calls device memory of GPU 3: a buggy guard would let the CPU
 * executor read it without a crash, so the test also checks that it is left untouched. */
char fakeDeviceMemory[16384];
/* Managed memory: host-accessible, so collectives may use it. The first array reports
 * host memory; the second reports device memory, as real drivers report cudaMallocManaged
 * memory, so only its IS_MANAGED attribute tells it is host-accessible. */
char fakeManagedMemory[4096];
char fakeManagedDeviceMemory[4096];
/* How often cuInit ran, for the test that the driver is initialized once per process. */
int fakeCuInitCalls;

static int inside(const char* base, size_t size, uint64_t address) {
  uint64_t begin = (uint64_t)(uintptr_t)base;
  return address >= begin && address < begin + size;
}

/* FAKE_CUDA_INIT_RESULT makes cuInit fail with that CUresult (e.g. 100, no device). */
int cuInit(unsigned flags) {
  __atomic_add_fetch(&fakeCuInitCalls, 1, __ATOMIC_RELAXED);
  const char* forced = getenv("FAKE_CUDA_INIT_RESULT");
  if (forced != NULL) return atoi(forced);
  return flags == 0 ? kSuccess : kErrorInvalidValue;
}

int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  const int device = inside(fakeDeviceMemory, sizeof(fakeDeviceMemory), ptr);
  const int managedHost = inside(fakeManagedMemory, sizeof(fakeManagedMemory), ptr);
  const int managedDevice = inside(fakeManagedDeviceMemory, sizeof(fakeManagedDeviceMemory), ptr);
  const int managed = managedHost || managedDevice;
  if (data == NULL || (!device && !managed)) return kErrorInvalidValue;
  switch (attribute) {
    case kAttrMemoryType:
      *(unsigned*)data = device || managedDevice ? kMemoryTypeDevice : kMemoryTypeHost;
      return kSuccess;
    case kAttrIsManaged:
      *(unsigned*)data = managed;
      return kSuccess;
    case kAttrDeviceOrdinal:
      *(int*)data = kFakeDeviceOrdinal;
      return kSuccess;
    default:
      return kErrorInvalidValue;
  }
}
