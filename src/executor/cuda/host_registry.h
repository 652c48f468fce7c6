// FIFO memory registered with the GPU (cudaHostRegister, mapped), shared by every GPU
// communicator of the process: a P2P FIFO is one rank's memory and its peer's, so two
// communicators may need the same range. Counted per range start; unregistered when
// the last user releases it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace chorus {

class HostRegistry {
 public:
  static HostRegistry& instance();

  // Registers [base, base + bytes) once (later calls count a user). False with `*why`
  // naming the CUDA error.
  bool acquire(void* base, size_t bytes, std::string* why);
  void release(void* base);
  // Unregisters [base, ...) whatever its count: its owner is about to free it, and a
  // registration outliving the memory would map a later allocation at the same address
  // to the old pages.
  void forget(void* base);
  // Where the GPU reaches host address `host` inside a registered range; nullptr when
  // no registered range holds it.
  void* devicePointer(void* host);

 private:
  struct Range {
    size_t bytes;
    void* device;
    int users;
    bool ours;  // registered here (someone else's registration is left to them)
  };
  std::mutex mutex_;
  std::map<char*, Range> ranges_;
};

}  // namespace chorus
