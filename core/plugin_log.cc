#include "core/plugin_log.h"

#include <cstdio>

#include "core/debug.h"

namespace chorus {
namespace {

// Chorus' subsystem bits are NCCL's.
uint64_t chorusSubsys(uint64_t unnamedSubsys, unsigned long ncclFlags) {
  constexpr unsigned long kNcclKnownBits = (1ul << 14) - 1;
  if ((ncclFlags & kNcclKnownBits) == kNcclKnownBits) return kSubsysAll;
  return ncclFlags != 0 ? ncclFlags : unnamedSubsys;
}

}  // namespace

void logPluginLine(uint64_t unnamedSubsys, ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, va_list args) {
  if (level <= NCCL_LOG_NONE || level > NCCL_LOG_TRACE || fmt == nullptr) return;
  const auto logLevel = static_cast<LogLevel>(level);
  const uint64_t subsys = chorusSubsys(unnamedSubsys, flags);
  if (logLevel != LogLevel::Warn && !logEnabled(logLevel, subsys)) return;
  char text[1024];
  vsnprintf(text, sizeof(text), fmt, args);
  logMessage(logLevel, subsys, logRank(), file != nullptr ? file : "plugin", line, "%s", text);
}

}  // namespace chorus
