#include "core/thread_name.h"

#include <pthread.h>

#include <atomic>
#include <string>

#include "core/settings.h"

namespace chorus {

namespace {

// NCCL_SET_THREAD_NAME, read once: -1 until then. An atomic, not a function-local static:
// a process that forks while one of its threads is initialising such a static leaves the
// child that initialisation in progress forever, and the child's first thread to get
// here (its proxy, say) would hang. Racing readers each read the same setting.
std::atomic<int> gNamesWanted{-1};

bool namesWanted() {
  int wanted = gNamesWanted.load(std::memory_order_relaxed);
  if (wanted < 0) {
    wanted = settingText(*findSetting("NCCL_SET_THREAD_NAME")) == "TRUE" ? 1 : 0;
    gNamesWanted.store(wanted, std::memory_order_relaxed);
  }
  return wanted != 0;
}

}  // namespace

void nameThisThread(const char* name) {
  if (!namesWanted()) return;
  std::string shortName(name);
  shortName.resize(std::min<size_t>(shortName.size(), 15));  // the kernel's limit
  pthread_setname_np(pthread_self(), shortName.c_str());
}

}  // namespace chorus
