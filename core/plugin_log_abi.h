// NCCL's logging ABI as every kind of plugin sees it (NVIDIA/nccl's ext-net, ext-tuner and
// ext-profiler examples, nccl/common.h): the levels, the subsystem bits and the logger a
// plugin's init receives. Plugins built against NCCL's headers pass these values, so the
// enumerators and the logger's signature are an ABI and must not be edited.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
