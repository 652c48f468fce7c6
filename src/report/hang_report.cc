#include "src/report/hang_report.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "core/thread_name.h"
#include "device/cpu/call_description.h"
#include "src/comm/comm.h"
#include "src/comm/flight_record.h"

namespace chorus {
namespace {

// One line of a report: a WARN where the log shows WARNs, else on stderr.
void reportLine(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void reportLine(int rank, const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  if (logEnabled(LogLevel::Warn, kSubsysAll)) {
    logMessage(LogLevel::Warn, kSubsysAll, rank, __FILE__, __LINE__, "%s", text);
  } else {
    fprintf(stderr, "[%d] Chorus %s\n", rank, text);
  }
}

std::string describeEntry(const FlightRecord::Entry& e) {
  std::string text = describeCall(e.call);
  if (e.peer >= 0) text += (e.call.kind == kStampSend ? " to rank " : " from rank ") + std::to_string(e.peer);
  return text;
}

const char* stateName(FlightRecord::State s) {
  switch (s) {
    case FlightRecord::State::Running:
      return "running";
    case FlightRecord::State::Done:
      return "done";
    case FlightRecord::State::Failed:
      return "failed";
  }
  return "?";
}

// The calls are serialised: reports of several communicators (or of a timeout and the
// signal at once) do not interleave their lines.
std::mutex& reportMutex() {
  static std::mutex mutex;
  return mutex;
}

void writeReportLocked(const ncclComm& comm, const char* why, const std::string& stuck) {
  const int rank = comm.rank;
  reportLine(rank, "Hang report of rank %d of %d (comm %p%s%s%s, pid %d): %s", rank, comm.nranks,
             static_cast<const void*>(&comm), comm.config.commName.empty() ? "" : " \"", comm.config.commName.c_str(),
             comm.config.commName.empty() ? "" : "\"", getpid(), why);
  if (!stuck.empty()) reportLine(rank, "  stuck: %s", stuck.c_str());
  const std::vector<FlightRecord::Entry> calls = comm.flight.entries();
  const double now = FlightRecord::now();
  if (calls.empty()) reportLine(rank, "  no call made yet");
  if (!calls.empty()) reportLine(rank, "  last %zu calls, oldest first:", calls.size());
  for (const FlightRecord::Entry& e : calls) {
    if (e.state == FlightRecord::State::Running) {
      reportLine(rank, "    %-60s running for %.3f s", describeEntry(e).c_str(), now - e.startSec);
    } else {
      reportLine(rank, "    %-60s %s%s%s after %.0f ms, %.3f s ago", describeEntry(e).c_str(), stateName(e.state),
                 e.state == FlightRecord::State::Failed ? " " : "",
                 e.state == FlightRecord::State::Failed ? ncclGetErrorString(e.result) : "",
                 (e.endSec - e.startSec) * 1e3, now - e.endSec);
    }
  }
  reportLine(rank, "End of the hang report of rank %d", rank);
}

int gWakePipe[2] = {-1, -1};

void onReportSignal(int) {
  const int saved = errno;
  const char byte = 1;
  if (write(gWakePipe[1], &byte, 1) < 0) {
    // Nothing to do: a full pipe already holds a request.
  }
  errno = saved;
}

int parseSignal(const std::string& name) {
  if (name == "USR1" || name == "SIGUSR1") return SIGUSR1;
  if (name == "USR2" || name == "SIGUSR2") return SIGUSR2;
  char* end = nullptr;
  const long n = strtol(name.c_str(), &end, 10);
  if (end != name.c_str() && *end == '\0' && n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP)
    return static_cast<int>(n);
  return 0;
}

}  // namespace

void writeHangReport(const ncclComm& comm, const char* why, const std::string& stuck) {
  std::lock_guard<std::mutex> lock(reportMutex());
  writeReportLocked(comm, why, stuck);
}

void writeHangReportsOfAllComms(const char* why) {
  std::lock_guard<std::mutex> lock(reportMutex());
  forEachLiveComm([why](const ncclComm& comm) { writeReportLocked(comm, why, ""); });
}

void armReportSignal() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string name = envString("CHORUS_REPORT_SIGNAL");
    if (name.empty()) return;
    const int sig = parseSignal(name);
    if (sig == 0) {
      WARN("CHORUS_REPORT_SIGNAL=%s is not a signal (USR1, USR2 or a number); no report on demand", name.c_str());
      return;
    }
    if (pipe2(gWakePipe, O_CLOEXEC) != 0) {
      WARN("CHORUS_REPORT_SIGNAL: pipe2 failed: %s; no report on demand", strerror(errno));
      return;
    }
    fcntl(gWakePipe[1], F_SETFL, O_NONBLOCK);  // the handler never blocks
    std::thread([] {
      nameThisThread("NCCL Report");
      char byte;
      while (true) {
        const ssize_t n = read(gWakePipe[0], &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        writeHangReportsOfAllComms("asked for (CHORUS_REPORT_SIGNAL)");
      }
    }).detach();
    struct sigaction action {};
    action.sa_handler = onReportSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(sig, &action, nullptr) != 0) {
      WARN("CHORUS_REPORT_SIGNAL: sigaction(%d) failed: %s; no report on demand", sig, strerror(errno));
      return;
    }
    INFO(kSubsysInit, "CHORUS_REPORT_SIGNAL: signal %d writes a hang report of every communicator", sig);
  });
}

}  // namespace chorus
