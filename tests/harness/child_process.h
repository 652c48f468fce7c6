// A process the test forked, killed (with its process group, where it has one of its own)
// and reaped when this goes out of scope, by any path out of the test: a child left alive
// would keep ctest's output pipe open, and the run would wait for its timeout. Header-only
// and free of the library, so unit tests (static library), API tests and system programs
// all use it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace chorus_test {

class ChildProcess {
 public:
  // `ownGroup`: the child made itself a process group (setpgid(0, 0)); the whole group
  // is killed, so that what it started goes with it.
  explicit ChildProcess(pid_t pid, bool ownGroup = false) : pid_(pid), ownGroup_(ownGroup) {}
  ~ChildProcess() { kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to `limit` for the child to end, killing it past that. Its exit code, 128 when
  // a signal ended it, or -1 when it had to be killed.
  int exitStatusWithin(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return -1;
    const auto until = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(ownGroup_ ? -pid_ : pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
  bool ownGroup_;
};

}  // namespace chorus_test
