#include "transport/net/socket_helpers.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "core/debug.h"
#include "core/thread_name.h"

namespace chorus {

SocketHelpers::WakeFd::WakeFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

SocketHelpers::WakeFd::~WakeFd() {
  if (fd_ >= 0) ::close(fd_);
}

void SocketHelpers::WakeFd::signal() {
  uint64_t one = 1;
  // Only EAGAIN (the counter is full, so a wake-up is pending anyway) can fail here.
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
}

void SocketHelpers::WakeFd::drain() {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(fd_, &count, sizeof(count));
}

SocketHelpers::~SocketHelpers() { stop(); }

ncclResult_t SocketHelpers::start(uint32_t count, Step step) {
  step_ = std::move(step);
  count_ = count;
  helpers_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    auto helper = std::make_unique<Helper>();
    if (helper->wake.fd() < 0) {
      WARN("NET/Socket: eventfd() for socket helper thread %u failed: %s", i, strerror(errno));
      stop();
      return ncclSystemError;
    }
    try {
      Helper& self = *helper;
      helper->thread = std::jthread([this, &self, i](std::stop_token stop) {
        nameThisThread("NCCL Sock");
        run(self, i, stop);
      });
    } catch (const std::system_error& e) {
      WARN("NET/Socket: starting socket helper thread %u of %u failed: %s", i, count, e.what());
      stop();
      return ncclSystemError;
    }
    helpers_.push_back(std::move(helper));
  }
  return ncclSuccess;
}

void SocketHelpers::wake() {
  for (auto& helper : helpers_) helper->wake.signal();
}

// Asks every helper to stop, wakes it out of poll(), then joins them all.
void SocketHelpers::stop() {
  for (auto& helper : helpers_) helper->thread.request_stop();
  wake();
  helpers_.clear();  // each Helper joins its thread before closing its eventfd
  count_ = 0;
}

void SocketHelpers::fail(ncclResult_t result) {
  ncclResult_t expected = ncclSuccess;
  error_.compare_exchange_strong(expected, result, std::memory_order_acq_rel);
}

void SocketHelpers::run(Helper& self, uint32_t index, const std::stop_token& stop) {
  std::vector<pollfd> fds;
  while (!stop.stop_requested()) {
    fds.clear();
    ncclResult_t result = step_(index, &fds);
    if (result != ncclSuccess) return fail(result);
    // After the step: a wake() that raced with it left the eventfd readable, so the
    // poll() below returns at once and no announced message waits for the timeout.
    fds.push_back({self.wake.fd(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), kPollTimeoutMs) < 0 && errno != EINTR) {
      WARN("NET/Socket: poll() in socket helper thread %u failed: %s", index, strerror(errno));
      return fail(ncclSystemError);
    }
    if (fds.back().revents & POLLIN) self.wake.drain();
  }
}

}  // namespace chorus
