#include "core/debug.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "core/env.h"
#include "nccl.h"

namespace chorus {
namespace {

struct LogConfig {
  LogLevel level = LogLevel::None;
  uint64_t subsys = kSubsysInit | kSubsysEnv;  // NCCL's default subsystems
  FILE* file = stderr;
  char host[64] = "";
  int pid = 0;
};

std::mutex gLogMutex;
std::atomic<LogSink> gLogSink{nullptr};
std::atomic<bool> gLogReady{false};
LogConfig gLog;

constexpr size_t kErrorLen = 1024;
thread_local char tLastError[kErrorLen] = "";
thread_local int tLogRank = -1;
char gLastError[kErrorLen] = "";

LogLevel parseLevel(const std::string& v) {
  if (strcasecmp(v.c_str(), "VERSION") == 0) return LogLevel::Version;
  if (strcasecmp(v.c_str(), "WARN") == 0) return LogLevel::Warn;
  if (strcasecmp(v.c_str(), "INFO") == 0) return LogLevel::Info;
  if (strcasecmp(v.c_str(), "ABORT") == 0) return LogLevel::Abort;
  if (strcasecmp(v.c_str(), "TRACE") == 0) return LogLevel::Trace;
  return LogLevel::None;
}

uint64_t parseSubsys(const std::string& list) {
  static const struct {
    const char* name;
    uint64_t bit;
  } kNames[] = {{"INIT", kSubsysInit},     {"COLL", kSubsysColl},   {"P2P", kSubsysP2p},
                {"SHM", kSubsysShm},       {"NET", kSubsysNet},     {"GRAPH", kSubsysGraph},
                {"TUNING", kSubsysTuning}, {"ENV", kSubsysEnv},     {"ALLOC", kSubsysAlloc},
                {"CALL", kSubsysCall},     {"PROXY", kSubsysProxy}, {"BOOTSTRAP", kSubsysBootstrap},
                {"REG", kSubsysReg},       {"ALL", kSubsysAll}};
  bool invert = !list.empty() && list[0] == '^';
  uint64_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string name = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (const auto& n : kNames)
      if (strcasecmp(name.c_str(), n.name) == 0) mask |= n.bit;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

// Expands %h (host name) and %p (pid) in NCCL_DEBUG_FILE.
std::string expandFileName(const std::string& pattern, const char* host, int pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(pid);
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

void initLocked() {
  if (gLogReady.load(std::memory_order_acquire)) return;
  gLog = LogConfig{};
  gethostname(gLog.host, sizeof(gLog.host) - 1);
  if (char* dot = strchr(gLog.host, '.')) *dot = '\0';
  gLog.pid = getpid();
  if (auto v = envValue("NCCL_DEBUG")) gLog.level = parseLevel(*v);
  if (auto v = envValue("NCCL_DEBUG_SUBSYS")) gLog.subsys = parseSubsys(*v);
  if (auto v = envValue("NCCL_DEBUG_FILE"); v && gLog.level > LogLevel::None) {
    std::string name = expandFileName(*v, gLog.host, gLog.pid);
    if (FILE* f = fopen(name.c_str(), "w")) {
      setvbuf(f, nullptr, _IOLBF, 0);
      gLog.file = f;
    }
  }
  gLogReady.store(true, std::memory_order_release);
  if (gLog.level >= LogLevel::Version) {
    fprintf(gLog.file, "%s:%d:%ld [%d] NCCL INFO NCCL version %d.%d.%d (Chorus %s, CPU executor)\n", gLog.host,
            gLog.pid, syscall(SYS_gettid), tLogRank, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, CHORUS_VERSION_STRING);
  }
}

void ensureInit() {
  if (gLogReady.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(gLogMutex);
  initLocked();
}

}  // namespace

bool logEnabled(LogLevel level, uint64_t subsys) {
  ensureInit();
  if (gLog.level < level) return false;
  return level <= LogLevel::Warn || (gLog.subsys & subsys) != 0;
}

void logMessage(LogLevel level, uint64_t subsys, int rank, const char* file, int line, const char* fmt, ...) {
  char text[kErrorLen];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (level == LogLevel::Warn) {
    snprintf(tLastError, sizeof(tLastError), "%s", text);
    std::lock_guard<std::mutex> lock(gLogMutex);
    snprintf(gLastError, sizeof(gLastError), "%s", text);
  }
  if (!logEnabled(level, subsys)) return;
  if (LogSink sink = gLogSink.load(std::memory_order_acquire)) {
    sink(level, subsys, file, line, text);
    return;
  }
  long tid = syscall(SYS_gettid);
  std::lock_guard<std::mutex> lock(gLogMutex);
  if (level == LogLevel::Warn) {
    fprintf(gLog.file, "%s:%d:%ld [%d] %s:%d NCCL WARN %s\n", gLog.host, gLog.pid, tid, rank, file, line, text);
  } else if (level == LogLevel::Trace) {
    fprintf(gLog.file, "%s:%d:%ld [%d] %s:%d NCCL TRACE %s\n", gLog.host, gLog.pid, tid, rank, file, line, text);
  } else {
    fprintf(gLog.file, "%s:%d:%ld [%d] NCCL INFO %s\n", gLog.host, gLog.pid, tid, rank, text);
  }
}

void setLogSink(LogSink sink) { gLogSink.store(sink, std::memory_order_release); }

void setLogRank(int rank) { tLogRank = rank; }
int logRank() { return tLogRank; }

const char* lastErrorText() {
  if (tLastError[0] != '\0') return tLastError;
  return gLastError;
}

void clearLastError() { tLastError[0] = '\0'; }

void resetDebugInit() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  if (gLog.file != stderr && gLog.file != nullptr) fclose(gLog.file);
  gLog.file = stderr;
  gLogReady.store(false, std::memory_order_release);
}

}  // namespace chorus
