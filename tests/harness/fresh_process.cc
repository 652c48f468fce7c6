#include "harness/fresh_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace chorus_test {
namespace {

constexpr char kMarker[] = "CHORUS_TEST_FRESH_PROCESS";

std::string currentTestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

// Reads `fd` until end of file or `deadline`; false when the deadline came first.
bool readAll(int fd, std::chrono::steady_clock::time_point deadline, std::string* out) {
  char buffer[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out->append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

bool inFreshProcess(std::chrono::seconds timeout) {
  const std::string name = currentTestName();
  if (const char* marked = std::getenv(kMarker); marked != nullptr && name == marked) return true;

  // The child's environment: this one's, marked with the test it is to run.
  std::vector<std::string> entries;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, kMarker, sizeof(kMarker) - 1) != 0) entries.emplace_back(*e);
  entries.push_back(std::string(kMarker) + "=" + name);
  std::vector<char*> envp;
  for (std::string& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=" + name;
  char* argv[] = {exe.data(), filter.data(), nullptr};

  int pipeFds[2];
  if (pipe2(pipeFds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipeFds[1], STDERR_FILENO);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipeFds[1]);
  if (spawned != 0) {
    close(pipeFds[0]);
    ADD_FAILURE() << "posix_spawn of " << exe << " for " << name << ": " << std::strerror(spawned);
    return false;
  }
  std::string output;
  const bool finished = readAll(pipeFds[0], std::chrono::steady_clock::now() + timeout, &output);
  close(pipeFds[0]);
  if (!finished) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    ADD_FAILURE() << name << " in a fresh process did not finish within " << timeout.count() << " s:\n" << output;
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << name << " failed in a fresh process (status 0x" << std::hex << status << std::dec << "):\n"
                  << output;
  } else if (output.find("[  PASSED  ] 1 test.") == std::string::npos) {
    ADD_FAILURE() << name << " did not run in the fresh process:\n" << output;
  }
  return false;
}

}  // namespace chorus_test
