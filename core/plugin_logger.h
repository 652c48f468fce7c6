// The logger NCCL hands every plugin it loads (net, profiler): the C types of NCCL's plugin
// headers (ncclDebugLogLevel, ncclDebugLogSubSys, ncclDebugLogger_t) and Chorus' logger of
// that type, so that a plugin's lines go through Chorus' log (NCCL_DEBUG, NCCL_DEBUG_FILE).
// The types are an ABI: their values and the logger's signature must not be edited.
#pragma once

#include <cstdarg>
#include <cstdint>

#include "core/debug.h"

extern "C" {

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 1,
  NCCL_COLL = 2,
  NCCL_P2P = 4,
  NCCL_SHM = 8,
  NCCL_NET = 16,
  NCCL_GRAPH = 32,
  NCCL_TUNING = 64,
  NCCL_ENV = 128,
  NCCL_ALLOC = 256,
  NCCL_CALL = 512,
  NCCL_PROXY = 1024,
  NCCL_NVLS = 2048,
  NCCL_BOOTSTRAP = 4096,
  NCCL_REG = 8192,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

}  // extern "C"

namespace chorus {

// Logs one plugin line; flags 0 count as `defaultSubsys`.
void logPluginLine(uint64_t defaultSubsys, ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, va_list args);

// The ncclDebugLogger_t to hand a plugin whose untagged lines belong to `DefaultSubsys`
// (kSubsysNet for net plugins, kSubsysProfile for profiler plugins).
template <uint64_t DefaultSubsys>
void pluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  logPluginLine(DefaultSubsys, level, flags, file, line, fmt, args);
  va_end(args);
}

}  // namespace chorus
