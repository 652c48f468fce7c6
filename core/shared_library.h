// A library opened at run time (dlopen, RTLD_NOW | RTLD_LOCAL) and its functions: how
// Chorus uses libibverbs, libhwloc and NVML without libnccl.so.2 depending on them.
#pragma once

#include <dlfcn.h>

#include <memory>
#include <string>

namespace chorus {

class SharedLibrary {
 public:
  // Opens `name`; false with `*why` naming the library and dlerror()'s text.
  bool open(const char* name, std::string* why) {
    name_ = name;
    dlerror();
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      *why = name_ + " could not be loaded (" + (error != nullptr ? error : "unknown error") + ")";
      return false;
    }
    handle_ = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
    return true;
  }

  // Looks `symbol` up into `*fn`; false with `*why` naming the symbol and the library.
  template <typename Fn>
  bool resolve(const char* symbol, Fn* fn, std::string* why) const {
    *fn = reinterpret_cast<Fn>(dlsym(handle_.get(), symbol));
    if (*fn == nullptr) *why = std::string(symbol) + " not found in " + name_;
    return *fn != nullptr;
  }

  // Keeps the library loaded for as long as a copy lives (dlclose with the last one).
  const std::shared_ptr<void>& handle() const { return handle_; }

 private:
  std::string name_;
  std::shared_ptr<void> handle_;
};

}  // namespace chorus
