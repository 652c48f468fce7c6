#include "harness/scoped_env.h"

#include <algorithm>
#include <cstdlib>

#include "nccl.h"

namespace chorus_test {
namespace {

bool isDebugVariable(const std::string& name) { return name.rfind("NCCL_DEBUG", 0) == 0; }

}  // namespace

void ScopedEnv::remember(const std::string& name) {
  bool known = std::any_of(saved_.begin(), saved_.end(), [&](const Saved& s) { return s.name == name; });
  if (!known) {
    const char* previous = std::getenv(name.c_str());
    saved_.push_back(Saved{name, previous ? std::optional<std::string>(previous) : std::nullopt});
  }
  touchedDebug_ |= isDebugVariable(name);
}

void ScopedEnv::set(const std::string& name, const std::string& value) {
  remember(name);
  setenv(name.c_str(), value.c_str(), 1);
  if (isDebugVariable(name)) ncclResetDebugInit();
}

void ScopedEnv::unset(const std::string& name) {
  remember(name);
  unsetenv(name.c_str());
  if (isDebugVariable(name)) ncclResetDebugInit();
}

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->previous) {
      setenv(it->name.c_str(), it->previous->c_str(), 1);
    } else {
      unsetenv(it->name.c_str());
    }
  }
  if (touchedDebug_) ncclResetDebugInit();  // closes the test's log file, back to the old settings
}

}  // namespace chorus_test
