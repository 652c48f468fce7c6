// backendFifoMemory (cuda_backend.h) for builds with the CUDA executor: P2P FIFO buffers on
// the receiver's GPU, written by the sender's over peer access. Buffers other processes map
// are cuMem allocations shared by POSIX file descriptor, as NCCL's (NCCL_CUMEM_ENABLE, on
// where the driver supports it), else cudaMalloc memory shared by legacy IPC handle. The
// driver's cuMem calls are found through the runtime, so the library does not link libcuda.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/env.h"
#include "src/executor/cuda/cuda_backend.h"
#include "src/executor/cuda/cuda_scopes.h"

namespace chorus {
namespace {

std::string failure(const char* call, cudaError_t err) {
  cudaGetLastError();  // not sticky: the next call must not see it
  return std::string(call) + ": " + cudaGetErrorString(err);
}
std::string failure(const char* call, CUresult result) {
  return std::string(call) + " failed (CUresult " + std::to_string(result) + ")";
}

// The driver's virtual memory calls, or none (an old driver).
struct CuMem {
  decltype(&cuDeviceGet) deviceGet = nullptr;
  decltype(&cuDeviceGetAttribute) deviceAttribute = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) addressFree = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) setAccess = nullptr;
  decltype(&cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&cuMemImportFromShareableHandle) importHandle = nullptr;
  bool loaded = false;
  decltype(&cuMemGetHandleForAddressRange) rangeHandle = nullptr;  // dma-buf (CUDA 11.7+ drivers), or none
};

template <typename F>
bool entryPoint(const char* name, F* fn) {
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  void* found = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &found, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || found == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<F>(found);
  return true;
}

const CuMem& cuMem() {
  static const CuMem api = [] {
    CuMem m;
    m.loaded = entryPoint("cuDeviceGet", &m.deviceGet) && entryPoint("cuDeviceGetAttribute", &m.deviceAttribute) &&
               entryPoint("cuMemGetAllocationGranularity", &m.granularity) && entryPoint("cuMemCreate", &m.create) &&
               entryPoint("cuMemRelease", &m.release) && entryPoint("cuMemAddressReserve", &m.reserve) &&
               entryPoint("cuMemAddressFree", &m.addressFree) && entryPoint("cuMemMap", &m.map) &&
               entryPoint("cuMemUnmap", &m.unmap) && entryPoint("cuMemSetAccess", &m.setAccess) &&
               entryPoint("cuMemExportToShareableHandle", &m.exportHandle) &&
               entryPoint("cuMemImportFromShareableHandle", &m.importHandle);
    entryPoint("cuMemGetHandleForAddressRange", &m.rangeHandle);
    return m;
  }();
  return api;
}

// A cuMem mapping: its physical allocation (this process's handle to it) and its size.
struct Mapping {
  CUmemGenericAllocationHandle handle;
  size_t bytes;
};

class CudaFifoMemory : public GpuFifoMemory {
 public:
  void* allocate(int device, size_t bytes, bool shareable, std::string* why) const override {
    DeviceScope scope(device);
    RelaxedCapture relaxed;  // a connection made on first use may come during a capture
    void* memory = nullptr;
    if (shareable && sharedByFd(device)) {
      memory = mapNew(device, bytes, why);
    } else {
      const cudaError_t err = cudaMalloc(&memory, bytes);
      if (err != cudaSuccess) *why = failure("cudaMalloc", err);
    }
    if (memory == nullptr) return nullptr;
    // Zeroed on a stream of its own: a kernel of another communicator spinning on the
    // legacy stream must not hold this up.
    cudaStream_t stream = nullptr;
    cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) {
      err = cudaMemsetAsync(memory, 0, bytes, stream);
      if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (err != cudaSuccess) {
      *why = failure("zeroing with cudaMemsetAsync", err);
      release(device, memory);
      return nullptr;
    }
    return memory;
  }

  void release(int device, void* memory) const override {
    DeviceScope scope(device);
    RelaxedCapture relaxed;
    if (unmapOwn(memory)) return;
    if (cudaFree(memory) != cudaSuccess) cudaGetLastError();  // a dead context has freed it already
  }

  bool canAccessPeer(int from, int to) const override {
    if (from == to) return true;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return can != 0;
  }

  bool enablePeerAccess(int from, int to, std::string* why) const override {
    if (from == to) return true;
    DeviceScope scope(from);
    RelaxedCapture relaxed;  // a Send/Recv connection made on first use may come during a capture
    const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    if (err == cudaSuccess) return true;
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return true;
    }
    *why = failure("cudaDeviceEnablePeerAccess", err);
    return false;
  }

  bool sharedByFd(int device) const override {
    if (envInt("NCCL_CUMEM_ENABLE", 1) == 0 || !cuMem().loaded) return false;
    CUdevice dev;
    int vmm = 0, fd = 0;
    return cuMem().deviceGet(&dev, device) == CUDA_SUCCESS &&
           cuMem().deviceAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) ==
               CUDA_SUCCESS &&
           cuMem().deviceAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
               CUDA_SUCCESS &&
           vmm != 0 && fd != 0;
  }

  int exportFd(void* memory, size_t* bytes, std::string* why) const override {
    Mapping m;
    if (!find(memory, &m)) {
      *why = "not a cuMem allocation of this process";
      return -1;
    }
    int fd = -1;
    const CUresult r = cuMem().exportHandle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
      *why = failure("cuMemExportToShareableHandle", r);
      return -1;
    }
    *bytes = m.bytes;
    return fd;
  }

  void* importFd(int device, int fd, size_t bytes, std::string* why) const override {
    DeviceScope scope(device);
    RelaxedCapture relaxed;
    CUmemGenericAllocationHandle handle;
    const CUresult r = cuMem().importHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      *why = failure("cuMemImportFromShareableHandle", r);
      return nullptr;
    }
    return mapHandle(device, handle, bytes, why);
  }

  // The legacy IPC handles (cudaIpcGetMemHandle): 64 bytes that travel in the connection's
  // handle, no file descriptor to pass.
  bool exportHandle(void* memory, char (&handle)[kIpcHandleBytes], std::string* why) const override {
    static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
    cudaIpcMemHandle_t ipc;
    const cudaError_t err = cudaIpcGetMemHandle(&ipc, memory);
    if (err != cudaSuccess) {
      *why = failure("cudaIpcGetMemHandle", err);
      return false;
    }
    std::memcpy(handle, &ipc, sizeof(ipc));
    return true;
  }

  void* importHandle(int device, const char (&handle)[kIpcHandleBytes], std::string* why) const override {
    DeviceScope scope(device);
    RelaxedCapture relaxed;
    cudaIpcMemHandle_t ipc;
    std::memcpy(&ipc, handle, sizeof(ipc));
    void* memory = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&memory, ipc, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      *why = failure("cudaIpcOpenMemHandle", err);
      return nullptr;
    }
    return memory;
  }

  void closeImported(int device, void* memory) const override {
    DeviceScope scope(device);
    RelaxedCapture relaxed;
    if (unmapOwn(memory)) return;
    if (cudaIpcCloseMemHandle(memory) != cudaSuccess) cudaGetLastError();
  }

  // The range rounded out to whole host pages, as the driver wants it.
  int dmaBufFd(int device, void* memory, size_t bytes, uint64_t* offset, std::string* why) const override {
    int supported = 0;
    CUdevice dev = 0;
    if (!cuMem().loaded || cuMem().rangeHandle == nullptr || cuMem().deviceGet(&dev, device) != CUDA_SUCCESS ||
        cuMem().deviceAttribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) != CUDA_SUCCESS ||
        supported == 0) {
      *why = "the GPU or its driver does not export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)";
      return -1;
    }
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(memory) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(memory) + bytes + page - 1) / page * page;
    int fd = -1;
    const CUresult r =
        cuMem().rangeHandle(&fd, static_cast<CUdeviceptr>(begin), end - begin, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
      *why = failure("cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)", r);
      return -1;
    }
    *offset = reinterpret_cast<uintptr_t>(memory) - begin;
    return fd;
  }

  bool flushRdmaWrites(int device, std::string* why) const override {
    DeviceScope scope(device);
    int options = 0;
    cudaError_t err = cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, device);
    if (err != cudaSuccess) {
      *why = failure("cudaDeviceGetAttribute(cudaDevAttrGPUDirectRDMAFlushWritesOptions)", err);
      return false;
    }
    if ((options & cudaFlushGPUDirectRDMAWritesOptionHost) == 0) {
      *why = "the GPU cannot flush GPUDirect RDMA writes from the host (cudaFlushGPUDirectRDMAWritesOptionHost)";
      return false;
    }
    err = cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                             cudaFlushGPUDirectRDMAWritesToOwner);
    if (err != cudaSuccess) {
      *why = failure("cudaDeviceFlushGPUDirectRDMAWrites", err);
      return false;
    }
    return true;
  }

 private:
  // A new physical allocation on `device`, exportable by file descriptor, mapped here.
  void* mapNew(int device, size_t bytes, std::string* why) const {
    CUmemAllocationProp prop = propertiesFor(device);
    size_t granularity = 0;
    CUresult r = cuMem().granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || granularity == 0) {
      *why = failure("cuMemGetAllocationGranularity", r);
      return nullptr;
    }
    const size_t size = (bytes + granularity - 1) / granularity * granularity;
    CUmemGenericAllocationHandle handle;
    r = cuMem().create(&handle, size, &prop, 0);
    if (r != CUDA_SUCCESS) {
      *why = failure("cuMemCreate", r);
      return nullptr;
    }
    return mapHandle(device, handle, size, why);
  }

  // Maps `handle` (`bytes`, a whole number of granules) read-write for `device` and every
  // GPU of this process that can reach it (as NCCL's ncclMemAlloc: cudaMalloc's memory
  // becomes reachable with peer access, a cuMem mapping only with its own access list);
  // takes the handle, released on failure.
  void* mapHandle(int device, CUmemGenericAllocationHandle handle, size_t bytes, std::string* why) const {
    CUdeviceptr address = 0;
    CUresult r = cuMem().reserve(&address, bytes, 0, 0, 0);
    if (r == CUDA_SUCCESS) {
      r = cuMem().map(address, bytes, 0, handle, 0);
      if (r == CUDA_SUCCESS) {
        const std::vector<CUmemAccessDesc> access = accessFor(device);
        r = cuMem().setAccess(address, bytes, access.data(), access.size());
        if (r == CUDA_SUCCESS) {
          std::lock_guard<std::mutex> lock(mutex_);
          mappings_[reinterpret_cast<void*>(address)] = Mapping{handle, bytes};
          return reinterpret_cast<void*>(address);
        }
        *why = failure("cuMemSetAccess", r);
        cuMem().unmap(address, bytes);
      } else {
        *why = failure("cuMemMap", r);
      }
      cuMem().addressFree(address, bytes);
    } else {
      *why = failure("cuMemAddressReserve", r);
    }
    cuMem().release(handle);
    return nullptr;
  }

  // Unmaps a cuMem mapping of this process and drops its handle (the memory itself goes
  // once no process maps it); false when `memory` is not one.
  bool unmapOwn(void* memory) const {
    Mapping m;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = mappings_.find(memory);
      if (it == mappings_.end()) return false;
      m = it->second;
      mappings_.erase(it);
    }
    const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(memory);
    cuMem().unmap(address, m.bytes);
    cuMem().addressFree(address, m.bytes);
    cuMem().release(m.handle);
    return true;
  }

  bool find(void* memory, Mapping* out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mappings_.find(memory);
    if (it == mappings_.end()) return false;
    *out = it->second;
    return true;
  }

  std::vector<CUmemAccessDesc> accessFor(int device) const {
    std::vector<CUmemAccessDesc> access;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      count = 0;
    }
    for (int d = 0; d < std::max(count, device + 1); ++d) {
      if (d != device && !canAccessPeer(d, device)) continue;
      CUmemAccessDesc desc{};
      desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc.location.id = d;
      desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      access.push_back(desc);
    }
    return access;
  }

  static CUmemAllocationProp propertiesFor(int device) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    // A NIC may register it (GPUDirect RDMA: ncclMemAlloc's memory, as NCCL's) where the
    // driver allows that of cuMem memory. Asked of the driver: the runtime's enum of device
    // attributes has no such value, and its cudaDeviceGetAttribute refuses it.
    CUdevice dev;
    int rdma = 0;
    if (cuMem().deviceGet(&dev, device) != CUDA_SUCCESS ||
        cuMem().deviceAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) !=
            CUDA_SUCCESS)
      rdma = 0;
    prop.allocFlags.gpuDirectRDMACapable = rdma != 0 ? 1 : 0;
    return prop;
  }

  mutable std::mutex mutex_;
  mutable std::map<void*, Mapping> mappings_;
};

}  // namespace

const GpuFifoMemory* backendFifoMemory() {
  static const CudaFifoMemory memory;
  return &memory;
}

}  // namespace chorus
