#include "harness/fork_signal.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace chorus_test {

ForkSignal::ForkSignal() {
  if (pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
}

ForkSignal::~ForkSignal() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

bool ForkSignal::post() const {
  const char byte = 1;
  return write(fds_[1], &byte, 1) == 1;
}

bool ForkSignal::wait(int count, std::chrono::seconds timeout) const {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (count > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fd{fds_[0], POLLIN, 0};
    const int ready = poll(&fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    char byte = 0;
    if (ready != 1 || read(fds_[0], &byte, 1) != 1) return false;
    --count;
  }
  return true;
}

}  // namespace chorus_test
