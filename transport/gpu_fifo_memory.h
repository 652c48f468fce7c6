// GPU memory for connection FIFOs, as the host runtime's CUDA backend provides it: the
// transports lay FIFOs out in it but never call CUDA themselves (the layering), and the
// host-path tests hand in a stand-in that counts what was asked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus {

class GpuFifoMemory {
 public:
  virtual ~GpuFifoMemory() = default;
  // `bytes` of zeroed memory on GPU `device`; null with `*why` naming the failure.
  // `shareable`: other processes will map it (the SHM transport), by file descriptor where
  // sharedByFd(device) says so, else by the legacy handles below.
  virtual void* allocate(int device, size_t bytes, bool shareable, std::string* why) const = 0;
  // Gives back what allocate returned, once no kernel can touch it any more.
  virtual void release(int device, void* memory) const = 0;
  // Whether kernels on GPU `from` can load and store in GPU `to`'s memory (true when they
  // are the same GPU).
  virtual bool canAccessPeer(int from, int to) const = 0;
  // Lets them (idempotent); false with `*why` naming the failure.
  virtual bool enablePeerAccess(int from, int to, std::string* why) const = 0;

  // Across processes (CUDA IPC), NCCL's way first: shareable memory is a cuMem allocation
  // whose POSIX file descriptor the other process imports (core/fd_handout.h carries it),
  // where the driver supports it and NCCL_CUMEM_ENABLE is not 0. The memory then lives until
  // every process let go of it, so its owner may release it at any time.
  virtual bool sharedByFd(int device) const = 0;
  // A descriptor for shareable memory (the caller closes it) and the allocation's bytes;
  // -1 with `*why` on failure.
  virtual int exportFd(void* memory, size_t* bytes, std::string* why) const = 0;
  // In the other process: the memory behind `fd` (`bytes` as exported) mapped for its GPU
  // `device`; null with `*why` on failure.
  virtual void* importFd(int device, int fd, size_t bytes, std::string* why) const = 0;
  // The legacy way (cudaIpcGetMemHandle): a 64-byte handle for shareable memory, and its
  // import; the owner must not release the memory while another process has it mapped.
  static constexpr size_t kIpcHandleBytes = 64;
  virtual bool exportHandle(void* memory, char (&handle)[kIpcHandleBytes], std::string* why) const = 0;
  virtual void* importHandle(int device, const char (&handle)[kIpcHandleBytes], std::string* why) const = 0;
  // Ends a mapping made by importFd or importHandle.
  virtual void closeImported(int device, void* memory) const = 0;

  // GPUDirect RDMA: the network transport's buffers in GPU memory, which the NIC reads and
  // writes. A dma-buf file descriptor covering [memory, memory + bytes) of allocate()'s
  // (unshared) memory, for the NIC's registration (ibv_reg_dmabuf_mr; the caller closes
  // it), with `*offset` of `memory` in it; -1 with `*why` where the GPU or driver has none.
  virtual int dmaBufFd(int device, void* memory, size_t bytes, uint64_t* offset, std::string* why) const = 0;
  // Makes what the NIC wrote into GPU `device`'s memory so far visible to its kernels before
  // the proxy publishes it (cudaDeviceFlushGPUDirectRDMAWrites); false with `*why`.
  virtual bool flushRdmaWrites(int device, std::string* why) const = 0;
};

}  // namespace chorus
