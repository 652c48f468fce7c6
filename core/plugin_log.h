// The ncclDebugLogger_t Chorus hands a plugin: the plugin's lines go through Chorus' own log
// (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE, the rank tag), as NCCL's do through NCCL's.
#pragma once

#include <cstdarg>
#include <cstdint>

#include "core/plugin_log_abi.h"

namespace chorus {

// Logs one line of a plugin. `unnamedSubsys`: the subsystems of a line logged with no
// flags (a plugin kind's own: NET for net plugins, TUNING for tuners). A plugin's "all"
// (every bit NCCL knows) is all of Chorus' subsystems.
void logPluginLine(uint64_t unnamedSubsys, ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, va_list args);

// The logger for one kind of plugin; a C function pointer cannot carry the kind, so each
// kind gets its own instance.
template <uint64_t kUnnamedSubsys>
void pluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  logPluginLine(kUnnamedSubsys, level, flags, file, line, fmt, args);
  va_end(args);
}

}  // namespace chorus
