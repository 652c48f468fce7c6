// Host memory standing in for the CUDA backend's GPU memory (transport/gpu_fifo_memory.h),
// for the host-path tests of the transports that put FIFOs in GPU memory.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "transport/gpu_fifo_memory.h"

namespace chorus::fixtures {

// Host memory standing in for GPU memory. Shareable memory goes by file descriptor (a
// memfd holding the address, carried by the real fd handout) when `byFd`, else by a legacy
// handle (the address itself). As the driver's: memory shared by descriptor lives until
// its last mapping ends; legacy memory must not be released while mapped elsewhere.
class StandInGpuMemory : public GpuFifoMemory {
 public:
  void* allocate(int device, size_t bytes, bool shareable, std::string* why) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failAllocations) {
      *why = "stand-in: out of memory";
      return nullptr;
    }
    char* memory = static_cast<char*>(std::calloc(1, bytes));
    blocks_[memory] = Block{device, bytes, shareable && byFd, false};
    ++allocations_;
    return memory;
  }
  void release(int device, void* memory) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<char*>(memory));
    if (it == blocks_.end() || it->second.device != device || it->second.released) {
      ++badReleases_;
      return;
    }
    if (imports_.count(memory) != 0) {
      if (!it->second.byFd) ++badReleases_;  // legacy memory freed under a mapping
      it->second.released = true;            // goes with its last mapping
      return;
    }
    blocks_.erase(it);
    std::free(memory);
  }
  bool canAccessPeer(int from, int to) const override { return from == to || peerAccess; }
  bool enablePeerAccess(int from, int to, std::string* why) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failPeerAccess) {
      *why = "stand-in: peer access refused";
      return false;
    }
    enabled_.insert({from, to});
    return true;
  }
  bool sharedByFd(int) const override { return byFd; }
  int exportFd(void* memory, size_t* bytes, std::string* why) const override {
    const int fd = memfd_create("stand-in-gpu-memory", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &memory, sizeof(memory), 0) != sizeof(memory)) {
      *why = "stand-in: memfd";
      return -1;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    *bytes = blocks_.at(static_cast<char*>(memory)).bytes;
    return fd;
  }
  void* importFd(int device, int fd, size_t bytes, std::string* why) const override {
    void* memory = nullptr;
    if (pread(fd, &memory, sizeof(memory), 0) != sizeof(memory)) {
      *why = "stand-in: not one of its descriptors";
      return nullptr;
    }
    return importAddress(device, memory, bytes, why);
  }
  bool exportHandle(void* memory, char (&handle)[kIpcHandleBytes], std::string*) const override {
    std::memset(handle, 0, kIpcHandleBytes);
    std::memcpy(handle, &memory, sizeof(memory));
    return true;
  }
  void* importHandle(int device, const char (&handle)[kIpcHandleBytes], std::string* why) const override {
    if (beforeImport) beforeImport();
    void* memory = nullptr;
    std::memcpy(&memory, handle, sizeof(memory));
    return importAddress(device, memory, 0, why);
  }
  // A memfd naming the address, as exportFd's (the stand-in's NIC needs no real dma-buf).
  int dmaBufFd(int device, void* memory, size_t, uint64_t* offset, std::string* why) const override {
    if (failDmaBuf || deviceOf(memory) != device) {
      *why = "stand-in: no dma-buf";
      return -1;
    }
    *offset = 0;
    const int fd = memfd_create("stand-in-dma-buf", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &memory, sizeof(memory), 0) != sizeof(memory)) {
      *why = "stand-in: memfd";
      return -1;
    }
    ++dmaBufs_;
    return fd;
  }
  bool flushRdmaWrites(int, std::string* why) const override {
    if (failFlush) {
      *why = "stand-in: no flush";
      return false;
    }
    ++flushes_;
    return true;
  }
  void closeImported(int device, void* memory) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (imports_[memory].erase(device) == 0) ++badReleases_;
    if (!imports_[memory].empty()) return;
    imports_.erase(memory);
    auto it = blocks_.find(static_cast<char*>(memory));
    if (it != blocks_.end() && it->second.released) {
      blocks_.erase(it);
      std::free(memory);
    }
  }

  // The GPU whose memory holds `p`, or -1 when it is not the stand-in's.
  int deviceOf(const void* p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(static_cast<const char*>(p));
    if (it == blocks_.begin()) return -1;
    --it;
    return static_cast<const char*>(p) < it->first + it->second.bytes ? it->second.device : -1;
  }
  // Whether `memory` (as allocate returned it) was allocated to be shared by file descriptor.
  bool sharedByFdBlock(const void* memory) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<char*>(const_cast<void*>(memory)));
    return it != blocks_.end() && it->second.byFd;
  }
  bool accessEnabled(int from, int to) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return enabled_.count({from, to}) != 0;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocks_.size();
  }
  uint64_t bytesOn(int device) const {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t bytes = 0;
    for (const auto& [memory, block] : blocks_) bytes += block.device == device ? block.bytes : 0;
    return bytes;
  }
  size_t imported() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return imports_.size();
  }
  int allocations() const { return allocations_; }
  int dmaBufs() const { return dmaBufs_; }
  int flushes() const { return flushes_; }
  int badReleases() const { return badReleases_; }

  bool peerAccess = true;
  bool byFd = false;
  bool failAllocations = false;
  bool failPeerAccess = false;
  bool failImports = false;
  std::function<void()> beforeImport;  // runs as a legacy import starts (what another thread does meanwhile)
  bool failDmaBuf = false;
  bool failFlush = false;

 private:
  struct Block {
    int device;
    size_t bytes;
    bool byFd;
    bool released;  // by its owner while still mapped elsewhere (by descriptor only)
  };
  void* importAddress(int device, void* memory, size_t bytes, std::string* why) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<char*>(memory));
    if (failImports || it == blocks_.end() || (bytes != 0 && bytes != it->second.bytes)) {
      *why = "stand-in: the handle names no live memory";
      return nullptr;
    }
    imports_[memory].insert(device);
    return memory;
  }

  mutable std::mutex mutex_;
  mutable std::map<const char*, Block> blocks_;
  mutable std::set<std::pair<int, int>> enabled_;
  mutable std::map<void*, std::set<int>> imports_;  // memory -> the GPUs it is mapped for
  mutable int allocations_ = 0;
  mutable int badReleases_ = 0;
  mutable std::atomic<int> dmaBufs_{0};
  mutable std::atomic<int> flushes_{0};  // from the proxy thread
};

}  // namespace chorus::fixtures
