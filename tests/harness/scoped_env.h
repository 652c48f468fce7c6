// Environment settings for one test, undone when the test ends.
//
// The library reads NCCL_* variables when a communicator is created (and the
// NCCL_DEBUG* ones at its first log line), so a test sets them before creating
// communicators: in thread mode in the test body, in process mode before the
// fork (children inherit the environment). Setting or restoring an NCCL_DEBUG*
// variable also calls ncclResetDebugInit, so logging picks up the new values.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace chorus_test {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  // Restores every touched variable to its value before the first set/unset (or unsets it).
  ~ScopedEnv();

  void set(const std::string& name, const std::string& value);
  void unset(const std::string& name);

 private:
  struct Saved {
    std::string name;
    std::optional<std::string> previous;
  };
  void remember(const std::string& name);

  std::vector<Saved> saved_;
  bool touchedDebug_ = false;
};

}  // namespace chorus_test
