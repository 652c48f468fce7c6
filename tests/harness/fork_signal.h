// A one-way signal between the forked ranks of one test (LaunchMode::kProcesses): made
// before the fork, so that every child holds both ends. A rank posts when it has done
// something the others must not run ahead of; another waits for a number of posts.
#pragma once

#include <chrono>

namespace chorus_test {

class ForkSignal {
 public:
  ForkSignal();
  ~ForkSignal();
  ForkSignal(const ForkSignal&) = delete;
  ForkSignal& operator=(const ForkSignal&) = delete;

  // False when the post could not be written.
  bool post() const;
  // Waits for `count` posts in all; false if they did not come within `timeout`.
  bool wait(int count, std::chrono::seconds timeout) const;

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace chorus_test
