#include "core/plugin_logger.h"

#include <cstdio>

namespace chorus {
namespace {

// Chorus' subsystem bits are NCCL's; a plugin's "all" (every bit it knows) is all of ours.
uint64_t chorusSubsys(unsigned long ncclFlags, uint64_t defaultSubsys) {
  constexpr unsigned long kNcclKnownBits = (1ul << 14) - 1;
  if ((ncclFlags & kNcclKnownBits) == kNcclKnownBits) return kSubsysAll;
  return ncclFlags != 0 ? ncclFlags : defaultSubsys;
}

}  // namespace

void logPluginLine(uint64_t defaultSubsys, ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, va_list args) {
  if (level <= NCCL_LOG_NONE || level > NCCL_LOG_TRACE || fmt == nullptr) return;
  auto logLevel = static_cast<LogLevel>(level);
  const uint64_t subsys = chorusSubsys(flags, defaultSubsys);
  if (logLevel != LogLevel::Warn && !logEnabled(logLevel, subsys)) return;
  char text[1024];
  vsnprintf(text, sizeof(text), fmt, args);
  logMessage(logLevel, subsys, logRank(), file != nullptr ? file : "plugin", line, "%s", text);
}

}  // namespace chorus
