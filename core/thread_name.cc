#include "core/thread_name.h"

#include <pthread.h>

#include <string>

#include "core/settings.h"

namespace chorus {

void nameThisThread(const char* name) {
  static const bool enabled = settingText(*findSetting("NCCL_SET_THREAD_NAME")) == "TRUE";
  if (!enabled) return;
  std::string shortName(name);
  shortName.resize(std::min<size_t>(shortName.size(), 15));  // the kernel's limit
  pthread_setname_np(pthread_self(), shortName.c_str());
}

}  // namespace chorus
