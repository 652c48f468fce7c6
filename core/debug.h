// Logging in NCCL's line format and the text behind ncclGetLastError.
//
//   host:pid:tid [rank] NCCL INFO message
//
// NCCL_DEBUG picks the level (VERSION, WARN, INFO, ABORT, TRACE), NCCL_DEBUG_SUBSYS
// the subsystems (a list, "^" negates, ALL), NCCL_DEBUG_FILE the destination
// (%h host name, %p pid). Lines of the levels in NCCL_DEBUG_TIMESTAMP_LEVELS (default
// WARN) start with the time in NCCL_DEBUG_TIMESTAMP_FORMAT (strftime; default
// "[%F %T] "). Every WARN also becomes the calling thread's last error.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

enum class LogLevel : int { None = 0, Version = 1, Warn = 2, Info = 3, Abort = 4, Trace = 5 };

// Subsystem bits, as NCCL names them.
enum LogSubsys : uint64_t {
  kSubsysInit = 1 << 0,
  kSubsysColl = 1 << 1,
  kSubsysP2p = 1 << 2,
  kSubsysShm = 1 << 3,
  kSubsysNet = 1 << 4,
  kSubsysGraph = 1 << 5,
  kSubsysTuning = 1 << 6,
  kSubsysEnv = 1 << 7,
  kSubsysAlloc = 1 << 8,
  kSubsysCall = 1 << 9,
  kSubsysProxy = 1 << 10,
  kSubsysNvls = 1 << 11,
  kSubsysBootstrap = 1 << 12,
  kSubsysReg = 1 << 13,
  kSubsysProfile = 1 << 14,
  kSubsysRas = 1 << 15,
  kSubsysAll = ~uint64_t(0),
};

// NCCL's default subsystems (NCCL_DEBUG_SUBSYS unset).
inline constexpr uint64_t kDefaultSubsys = kSubsysInit | kSubsysEnv | kSubsysBootstrap;

// NCCL_DEBUG_SUBSYS's syntax ("INIT,NET", "^COLL", "ALL") to bits, and bits back to names.
uint64_t parseSubsysList(const char* list);
std::string subsysNames(uint64_t mask);

// NCCL_DEBUG's level names, and NCCL_DEBUG_TIMESTAMP_LEVELS' lists of them (bit 1 << level).
LogLevel parseLogLevel(const char* name);
const char* logLevelName(LogLevel level);
uint32_t parseLevelList(const char* list);
std::string levelNames(uint32_t mask);

// Is a message of this level and subsystem printed? Cheap after the first call.
bool logEnabled(LogLevel level, uint64_t subsys);

// Writes one line. `rank` is printed in the brackets (-1 prints nothing useful: "[-1]").
void logMessage(LogLevel level, uint64_t subsys, int rank, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 6, 7)));

// Where formatted lines go instead of NCCL_DEBUG_FILE/stderr, when set: for Chorus code
// built into a net plugin, which must log through the logger the host library hands it.
using LogSink = void (*)(LogLevel level, uint64_t subsys, const char* file, int line, const char* text);
void setLogSink(LogSink sink);

// A communicator's name (ncclConfig_t.commName) as log contexts hold it: interned for the
// life of the process, one copy per distinct name, so that a context is two words to set
// (every call enters several) and a line written after its communicator is gone (an abort
// from another thread) still reads valid text.
class LogName {
 public:
  LogName() = default;
  explicit LogName(std::string_view name);  // "" for an empty name
  const char* c_str() const { return text_; }
  bool empty() const { return text_[0] == '\0'; }
  bool operator==(const LogName& other) const { return text_ == other.text_; }  // interned

 private:
  const char* text_ = "";
};

// The communicator this thread's lines are about (set while one's call or work runs): its
// rank in the brackets, and its name, when it has one, before the text of every line and
// of ncclGetLastError. ScopedLogContext restores the previous one.
void setLogContext(int rank, LogName commName);
int logRank();
const char* logCommName();  // "" when none

class ScopedLogContext {
 public:
  ScopedLogContext(int rank, LogName commName);
  ~ScopedLogContext();
  ScopedLogContext(const ScopedLogContext&) = delete;
  ScopedLogContext& operator=(const ScopedLogContext&) = delete;

 private:
  int savedRank_;
  LogName savedName_;
};

// ncclGetLastError: the last WARN text of this thread, else of the process.
const char* lastErrorText();
void clearLastError();
// Makes `text` this thread's last error: a call whose work failed on another thread (a
// group's init threads) hands the cause to its caller.
void setThreadLastError(const char* text);

// ncclResetDebugInit: re-read NCCL_DEBUG* on the next message.
void resetDebugInit();

}  // namespace chorus

// The few macros here capture __FILE__/__LINE__, which a function cannot.
#define WARN(...)                                                                                               \
  ::chorus::logMessage(::chorus::LogLevel::Warn, ::chorus::kSubsysAll, ::chorus::logRank(), __FILE__, __LINE__, \
                       __VA_ARGS__)
#define INFO(subsys, ...)                                                                                             \
  do {                                                                                                                \
    if (::chorus::logEnabled(::chorus::LogLevel::Info, (subsys)))                                                     \
      ::chorus::logMessage(::chorus::LogLevel::Info, (subsys), ::chorus::logRank(), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TRACE(subsys, ...)                                                                                             \
  do {                                                                                                                 \
    if (::chorus::logEnabled(::chorus::LogLevel::Trace, (subsys)))                                                     \
      ::chorus::logMessage(::chorus::LogLevel::Trace, (subsys), ::chorus::logRank(), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// Propagate a failing ncclResult_t to the caller.
#define CHORUS_CHECK(call)                              \
  do {                                                  \
    ncclResult_t chorus_res_ = (call);                  \
    if (chorus_res_ != ncclSuccess) return chorus_res_; \
  } while (0)
