// What a test logs: the WARN lines of a stretch of code, caught through the log sink
// (core/debug.h) whatever the environment's NCCL_DEBUG.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"

namespace chorus {
namespace fixtures {

// The WARN lines logged while `body` runs (from any thread).
template <typename Body>
inline std::vector<std::string> warningsDuring(Body&& body) {
  static std::mutex mutex;
  static std::vector<std::string>* caught = nullptr;
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(mutex);
    caught = &lines;
  }
  setenv("NCCL_DEBUG", "WARN", 1);
  resetDebugInit();  // the level is read once: read it again
  setLogSink([](LogLevel level, uint64_t, const char*, int, const char* text) {
    std::lock_guard<std::mutex> lock(mutex);
    if (level == LogLevel::Warn && caught != nullptr) caught->emplace_back(text);
  });
  body();
  setLogSink(nullptr);
  unsetenv("NCCL_DEBUG");
  resetDebugInit();
  std::lock_guard<std::mutex> lock(mutex);
  caught = nullptr;
  return lines;
}

inline bool anyMentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

}  // namespace fixtures
}  // namespace chorus
