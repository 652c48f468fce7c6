#include "src/executor/cuda/host_registry.h"

namespace chorus {

HostRegistry& HostRegistry::instance() {
  static HostRegistry* registry = new HostRegistry();  // never destroyed: used from static destructors
  return *registry;
}

bool HostRegistry::acquire(void* base, size_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lock(mutex_);
  char* key = static_cast<char*>(base);
  auto it = ranges_.find(key);
  if (it != ranges_.end()) {
    ++it->second.users;
    return true;
  }
  bool ours = true;
  cudaError_t err = cudaHostRegister(base, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err == cudaErrorHostMemoryAlreadyRegistered) {  // pinned by its owner (or the user)
    cudaGetLastError();
    ours = false;
  } else if (err != cudaSuccess) {
    *why = std::string("cudaHostRegister: ") + cudaGetErrorString(err);
    return false;
  }
  void* device = nullptr;
  err = cudaHostGetDevicePointer(&device, base, 0);
  if (err != cudaSuccess) {
    *why = std::string("cudaHostGetDevicePointer: ") + cudaGetErrorString(err);
    if (ours) cudaHostUnregister(base);
    return false;
  }
  ranges_.emplace(key, Range{bytes, device, 1, ours});
  return true;
}

void HostRegistry::release(void* base) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.find(static_cast<char*>(base));
  if (it == ranges_.end() || --it->second.users > 0) return;
  if (it->second.ours) cudaHostUnregister(base);
  ranges_.erase(it);
}

void HostRegistry::forget(void* base) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.find(static_cast<char*>(base));
  if (it == ranges_.end()) return;
  if (it->second.ours) cudaHostUnregister(base);
  ranges_.erase(it);
}

void* HostRegistry::devicePointer(void* host) {
  std::lock_guard<std::mutex> lock(mutex_);
  char* p = static_cast<char*>(host);
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.bytes) return nullptr;
  return static_cast<char*>(it->second.device) + (p - it->first);
}

}  // namespace chorus
