// Version, error strings, memory, registration and user reduction ops.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/executor/executor_choice.h"

using namespace chorus;

namespace {

std::mutex gMemMutex;
struct MemAllocation {
  size_t size;
  bool device;  // GPU memory from the CUDA executor (gpuMemAlloc), else host memory
  int cudaDev;  // ... on this CUDA device
};
std::unordered_map<void*, MemAllocation>& memAllocations() {
  static std::unordered_map<void*, MemAllocation> allocations;
  return allocations;
}

// Whether a Send/Recv receiving into [buff, buff + size) may let its sender write there
// directly (BufferRegistration::offerable).
bool offerableBuffer(const ncclComm* comm, const void* buff, size_t size) {
  if (comm->executorChoice.load() != ExecutorChoice::Cuda) return true;
  std::lock_guard<std::mutex> lock(gMemMutex);
  for (const auto& [base, allocation] : memAllocations())
    if (allocation.device && allocation.cudaDev == comm->cudaDev && rangeWithin(base, allocation.size, buff, size))
      return true;
  return false;
}

}  // namespace

extern "C" {

ncclResult_t pncclGetVersion(int* version) {
  CHORUS_CHECK(checkNotNull(version, "version", "ncclGetVersion"));
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the Chorus developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* pncclGetLastError(ncclComm_t) { return lastErrorText(); }

void pncclResetDebugInit(void) { resetDebugInit(); }

// Device memory where the CUDA executor runs, shareable with other processes and NICs as
// NCCL's (gpuMemAlloc); elsewhere host memory, page-aligned and zero-filled, which the CPU
// executor uses.
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  CHORUS_CHECK(checkNotNull(ptr, "ptr", "ncclMemAlloc"));
  const size_t page = 4096;
  if (size > SIZE_MAX - page) {
    WARN("ncclMemAlloc: invalid argument: size %zu is too large", size);
    return ncclInvalidArgument;
  }
  const size_t bytes = (size + page - 1) / page * page + (size == 0 ? page : 0);
  void* p = nullptr;
  ncclResult_t r = ncclSuccess;
  int cudaDev = -1;
  const bool device = gpuMemAlloc(&p, bytes, &cudaDev, &r);
  if (device) {
    CHORUS_CHECK(r);
  } else {
    p = std::aligned_alloc(page, bytes);
    if (!p) {
      WARN("ncclMemAlloc: allocating %zu bytes failed", size);
      return ncclSystemError;
    }
    memset(p, 0, bytes);
  }
  std::lock_guard<std::mutex> lock(gMemMutex);
  memAllocations()[p] = MemAllocation{size, device, cudaDev};
  *ptr = p;
  if (device) {
    INFO(kSubsysAlloc, "ncclMemAlloc: %zu bytes at %p (memory of CUDA device %d)", size, p, cudaDev);
  } else {
    INFO(kSubsysAlloc, "ncclMemAlloc: %zu bytes at %p (host memory)", size, p);
  }
  return ncclSuccess;
}

ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  std::unique_lock<std::mutex> lock(gMemMutex);
  auto it = memAllocations().find(ptr);
  if (it == memAllocations().end()) {
    WARN("ncclMemFree: invalid argument: ptr %p was not returned by ncclMemAlloc", ptr);
    return ncclInvalidArgument;
  }
  const MemAllocation allocation = it->second;
  memAllocations().erase(it);
  lock.unlock();
  if (allocation.device) {
    gpuMemFree(ptr, allocation.cudaDev);
  } else {
    std::free(ptr);
  }
  return ncclSuccess;
}

// A registered buffer is offered to senders on direct connections (FifoEnd::direct): a
// Send/Recv into it moves in place, zero-copy (device/common/simple_primitives.h).
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  const char* func = "ncclCommRegister";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(handle, "handle", func));
  *handle = nullptr;  // what a refused registration leaves
  CHORUS_CHECK(checkNotNull(buff, "buff", func));
  if (size == 0) {
    WARN("%s: invalid argument: size is 0", func);
    return ncclInvalidArgument;
  }
  // A handle is a number, never an address: ncclCommDeregister finds it without reading
  // through what a caller passes, and a stale handle (deregistered before) matches nothing.
  static std::atomic<uint64_t> lastHandle{0};
  const bool offerable = offerableBuffer(comm, buff, size);
  const uint64_t number = lastHandle.fetch_add(1) + 1;
  std::lock_guard<std::mutex> lock(comm->regMutex);
  comm->registrations.push_back(BufferRegistration{buff, size, offerable, number});
  *handle = reinterpret_cast<void*>(static_cast<uintptr_t>(number));
  return ncclSuccess;
}

ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  const char* func = "ncclCommDeregister";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(handle, "handle", func));
  std::lock_guard<std::mutex> lock(comm->regMutex);
  const auto number = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
  const auto found = std::find_if(comm->registrations.begin(), comm->registrations.end(),
                                  [number](const BufferRegistration& r) { return r.handle == number; });
  if (found != comm->registrations.end()) {
    comm->registrations.erase(found);
    return ncclSuccess;
  }
  WARN(
      "%s: invalid argument: handle %p is not a live registration of this communicator (deregistered already, "
      "another communicator's, or not from ncclCommRegister)",
      func, handle);
  return ncclInvalidArgument;
}

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* func = "ncclRedOpCreatePreMulSum";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  CHORUS_CHECK(checkNotNull(op, "op", func));
  CHORUS_CHECK(checkNotNull(scalar, "scalar", func));
  // NCCL answers an unknown datatype here with ncclInternalError (measured, 2.29 to 2.31).
  if (checkDatatype(datatype, func) != ncclSuccess) return ncclInternalError;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("%s: invalid argument: residence %d is not an ncclScalarResidence_t", func, static_cast<int>(residence));
    return ncclInvalidArgument;
  }
  UserRedOp user;
  user.dtype = datatype;
  user.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    memcpy(&user.scalarBits, scalar, typeSize(datatype));
  } else {
    user.scalarPtr = scalar;
  }
  *op = static_cast<ncclRedOp_t>(ncclNumOps + comm->userOps.add(user));
  return ncclSuccess;
}

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* func = "ncclRedOpDestroy";
  const CommCall held(comm);
  CHORUS_CHECK(held.check(func));
  const int index = static_cast<int>(op) - ncclNumOps;
  if (static_cast<int>(op) >= 0 && static_cast<int>(op) < ncclNumOps) {
    WARN("%s: invalid argument: op %d is a built-in op and cannot be destroyed", func, static_cast<int>(op));
    return ncclInvalidArgument;
  }
  if (!comm->userOps.remove(index)) {
    WARN("%s: invalid argument: op %d was not created on this communicator", func, static_cast<int>(op));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// NCCL 2.32 encrypts its TCP sockets with TLS and a pre-shared key; Chorus' sockets are
// authenticated by the unique id's secret but not encrypted, so only "no encryption" is
// accepted, and a request for it is refused rather than silently ignored.
ncclResult_t pncclSetEncryption(const ncclEncryptionConfig_t* config) {
  const char* func = "ncclSetEncryption";
  CHORUS_CHECK(checkNotNull(config, "config", func));
  if (config->magic != NCCL_API_MAGIC || config->size < offsetof(ncclEncryptionConfig_t, psk) + sizeof(const char*)) {
    WARN("%s: invalid argument: config magic 0x%x size %zu (initialize it with NCCL_ENCRYPTION_CONFIG_INITIALIZER)",
         func, config->magic, config->size);
    return ncclInvalidArgument;
  }
  if (config->mode == NCCL_ENCRYPTION_MODE_NONE) return ncclSuccess;
  if (config->mode != NCCL_ENCRYPTION_MODE_PSK) {
    WARN("%s: invalid argument: mode %d is not an ncclEncryptionMode_t", func, config->mode);
    return ncclInvalidArgument;
  }
  WARN(
      "%s: encrypting the sockets (NCCL_ENCRYPTION_MODE_PSK) is not supported by Chorus: its connections are "
      "authenticated by the unique id's secret, not encrypted",
      func);
  return ncclInvalidUsage;
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclGetVersion)
CHORUS_EXPORT_ALIAS(ncclGetErrorString)
CHORUS_EXPORT_ALIAS(ncclGetLastError)
CHORUS_EXPORT_ALIAS(ncclResetDebugInit)
CHORUS_EXPORT_ALIAS(ncclMemAlloc)
CHORUS_EXPORT_ALIAS(ncclMemFree)
CHORUS_EXPORT_ALIAS(ncclCommRegister)
CHORUS_EXPORT_ALIAS(ncclCommDeregister)
CHORUS_EXPORT_ALIAS(ncclRedOpCreatePreMulSum)
CHORUS_EXPORT_ALIAS(ncclRedOpDestroy)
CHORUS_EXPORT_ALIAS(ncclSetEncryption)

// NCCL 2.28 also exports this internal hook (it re-reads NCCL_DEBUG*); kept for ABI.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() { resetDebugInit(); }
