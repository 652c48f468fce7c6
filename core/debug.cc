#include "core/debug.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/env.h"
#include "nccl.h"

namespace chorus {
namespace {

struct LogConfig {
  LogLevel level = LogLevel::None;
  uint64_t subsys = kDefaultSubsys;
  uint32_t timestampLevels = 1u << static_cast<int>(LogLevel::Warn);
  std::string timestampFormat = "[%F %T] ";
  FILE* file = stderr;
  char host[64] = "";
  int pid = 0;
};

std::mutex gLogMutex;
// A fork while another thread holds the log's mutex (every WARN takes it) would leave the
// child's copy locked, and the child's first WARN would hang: the forking thread holds it
// across fork() instead.
[[maybe_unused]] const int gLogMutexForkSafe =
    pthread_atfork([] { gLogMutex.lock(); }, [] { gLogMutex.unlock(); }, [] { gLogMutex.unlock(); });
std::atomic<LogSink> gLogSink{nullptr};
std::atomic<bool> gLogReady{false};
LogConfig gLog;

constexpr size_t kErrorLen = 1024;
thread_local char tLastError[kErrorLen] = "";
struct LogContext {  // one thread-local: one lookup in each function that sets it
  int rank = -1;
  LogName commName;
};
thread_local LogContext tLogContext;
char gLastError[kErrorLen] = "";

struct NamedBit {
  const char* name;
  uint64_t bit;
};
// In bit order, so a mask prints its names as NCCL does ("INIT,ENV,BOOTSTRAP").
constexpr NamedBit kSubsysNames[] = {{"INIT", kSubsysInit},
                                     {"COLL", kSubsysColl},
                                     {"P2P", kSubsysP2p},
                                     {"SHM", kSubsysShm},
                                     {"NET", kSubsysNet},
                                     {"GRAPH", kSubsysGraph},
                                     {"TUNING", kSubsysTuning},
                                     {"ENV", kSubsysEnv},
                                     {"ALLOC", kSubsysAlloc},
                                     {"CALL", kSubsysCall},
                                     {"PROXY", kSubsysProxy},
                                     {"NVLS", kSubsysNvls},
                                     {"BOOTSTRAP", kSubsysBootstrap},
                                     {"REG", kSubsysReg},
                                     {"PROFILE", kSubsysProfile},
                                     {"RAS", kSubsysRas}};
constexpr const char* kLevelNames[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};

// A list of names ("A,B", "^A" = all but A, "ALL") to bits; unknown names add nothing.
template <typename Lookup>
uint64_t parseNameList(const char* list, uint64_t all, Lookup bitOf) {
  std::string text = list ? list : "";
  const bool invert = !text.empty() && text[0] == '^';
  uint64_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string name = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    mask |= strcasecmp(name.c_str(), "ALL") == 0 ? all : bitOf(name.c_str());
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? (all & ~mask) : mask;
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
  if (auto v = envValue("NCCL_DEBUG")) gLog.level = parseLogLevel(v->c_str());
  if (auto v = envValue("NCCL_DEBUG_SUBSYS")) gLog.subsys = parseSubsysList(v->c_str());
  if (auto v = envValue("NCCL_DEBUG_TIMESTAMP_LEVELS")) gLog.timestampLevels = parseLevelList(v->c_str());
  if (auto v = envValue("NCCL_DEBUG_TIMESTAMP_FORMAT")) gLog.timestampFormat = *v;
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
            gLog.pid, syscall(SYS_gettid), tLogContext.rank, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, CHORUS_VERSION_STRING);
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
  // A named communicator's lines and errors say which one they are about.
  const LogName commName = tLogContext.commName;
  const int named = commName.empty() ? 0 : snprintf(text, sizeof(text), "comm \"%.63s\": ", commName.c_str());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text + named, sizeof(text) - named, fmt, ap);
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
  const int pid = getpid();  // not the pid cached at set-up: a forked child's lines name the child
  std::lock_guard<std::mutex> lock(gLogMutex);
  char stamp[128] = "";
  if ((gLog.timestampLevels >> static_cast<int>(level)) & 1) {
    const time_t now = time(nullptr);
    struct tm local;
    localtime_r(&now, &local);
    if (strftime(stamp, sizeof(stamp), gLog.timestampFormat.c_str(), &local) == 0) stamp[0] = '\0';
  }
  if (level == LogLevel::Warn) {
    fprintf(gLog.file, "%s%s:%d:%ld [%d] %s:%d NCCL WARN %s\n", stamp, gLog.host, pid, tid, rank, file, line, text);
  } else if (level == LogLevel::Trace) {
    fprintf(gLog.file, "%s%s:%d:%ld [%d] %s:%d NCCL TRACE %s\n", stamp, gLog.host, pid, tid, rank, file, line, text);
  } else {
    fprintf(gLog.file, "%s%s:%d:%ld [%d] NCCL INFO %s\n", stamp, gLog.host, pid, tid, rank, text);
  }
}

void setLogSink(LogSink sink) { gLogSink.store(sink, std::memory_order_release); }

LogName::LogName(std::string_view name) {
  if (name.empty()) return;
  // Never freed: a program names a handful of communicators, and a context may outlive one.
  static std::mutex mutex;
  static std::unordered_set<std::string>* names = new std::unordered_set<std::string>;
  std::lock_guard<std::mutex> lock(mutex);
  text_ = names->emplace(name).first->c_str();
}

void setLogContext(int rank, LogName commName) { tLogContext = LogContext{rank, commName}; }
int logRank() { return tLogContext.rank; }
const char* logCommName() { return tLogContext.commName.c_str(); }

// Entered and left several times by every call: two words in and out (an snprintf of the
// name here cost an 8-byte AllReduce a fifth of its time).
ScopedLogContext::ScopedLogContext(int rank, LogName commName) {
  LogContext& context = tLogContext;
  savedRank_ = context.rank;
  savedName_ = context.commName;
  context = LogContext{rank, commName};
}

ScopedLogContext::~ScopedLogContext() { setLogContext(savedRank_, savedName_); }

const char* lastErrorText() {
  if (tLastError[0] != '\0') return tLastError;
  return gLastError;
}

void clearLastError() { tLastError[0] = '\0'; }

void setThreadLastError(const char* text) { snprintf(tLastError, sizeof(tLastError), "%s", text ? text : ""); }

uint64_t parseSubsysList(const char* list) {
  return parseNameList(list, kSubsysAll, [](const char* name) -> uint64_t {
    for (const NamedBit& n : kSubsysNames)
      if (strcasecmp(name, n.name) == 0) return n.bit;
    return 0;
  });
}

std::string subsysNames(uint64_t mask) {
  if (mask == kSubsysAll) return "ALL";
  std::string out;
  for (const NamedBit& n : kSubsysNames)
    if (mask & n.bit) out.append(out.empty() ? "" : ",").append(n.name);
  return out;
}

LogLevel parseLogLevel(const char* name) {
  for (int level = 1; level < static_cast<int>(std::size(kLevelNames)); ++level)
    if (strcasecmp(name, kLevelNames[level]) == 0) return static_cast<LogLevel>(level);
  return LogLevel::None;
}

const char* logLevelName(LogLevel level) { return kLevelNames[static_cast<int>(level)]; }

uint32_t parseLevelList(const char* list) {
  constexpr uint64_t kAllLevels = (1u << std::size(kLevelNames)) - 2;  // every level but NONE
  return static_cast<uint32_t>(parseNameList(list, kAllLevels, [](const char* name) -> uint64_t {
    const LogLevel level = parseLogLevel(name);
    return level == LogLevel::None ? 0 : 1u << static_cast<int>(level);
  }));
}

std::string levelNames(uint32_t mask) {
  std::string out;
  for (int level = 1; level < static_cast<int>(std::size(kLevelNames)); ++level)
    if ((mask >> level) & 1) out.append(out.empty() ? "" : ",").append(kLevelNames[level]);
  return out;
}

void resetDebugInit() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  if (gLog.file != stderr && gLog.file != nullptr) fclose(gLog.file);
  gLog.file = stderr;
  gLogReady.store(false, std::memory_order_release);
}

}  // namespace chorus
