// The helper threads of one socket net comm, for NCCL_SOCKET_NTHREADS >= 2: each runs a
// step function of the comm (move what its data sockets allow, without waiting) and then
// waits in poll() on the sockets that step named plus its own wake-up eventfd. The comm
// wakes its helpers when it announces new messages; stopping wakes them too, so the
// destructor joins within one step even when the peer is silent. Without NTHREADS >= 2 a
// comm has no SocketHelpers at all (a small machine must not pay for idle threads).
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "nccl.h"

namespace chorus {

class SocketHelpers {
 public:
  // One step of helper `helper`: moves what its sockets allow right now, then lists in
  // `waitFor` the sockets it still has work on (empty: idle until the next wake()).
  using Step = std::function<ncclResult_t(uint32_t helper, std::vector<pollfd>* waitFor)>;
  // The longest a helper sleeps without a wake-up: a safety net, since stop() wakes it.
  static constexpr int kPollTimeoutMs = 20;

  SocketHelpers() = default;
  ~SocketHelpers();  // stops and joins every helper
  SocketHelpers(const SocketHelpers&) = delete;
  SocketHelpers& operator=(const SocketHelpers&) = delete;

  // Starts `count` helpers running `step`; on failure none is left running.
  ncclResult_t start(uint32_t count, Step step);
  // Set before the first helper starts, so helpers may read it too.
  uint32_t count() const { return count_; }
  // New work was announced: every helper runs its step again soon.
  void wake();
  // Stops and joins every helper (again: nothing); afterwards none touches the comm.
  void stop();
  // The first error of any helper (ncclSuccess while none failed). A helper stops at its
  // first error; everything it published before failing happens-before this load.
  ncclResult_t error() const { return error_.load(std::memory_order_acquire); }

 private:
  // An eventfd that wakes one helper's poll(); owns the fd.
  class WakeFd {
   public:
    WakeFd();
    ~WakeFd();
    WakeFd(const WakeFd&) = delete;
    WakeFd& operator=(const WakeFd&) = delete;
    int fd() const { return fd_; }
    void signal();
    void drain();

   private:
    int fd_;
  };

  struct Helper {
    WakeFd wake;
    std::jthread thread;  // declared last: joined before the eventfd closes
  };

  void run(Helper& self, uint32_t index, const std::stop_token& stop);
  void fail(ncclResult_t result);

  Step step_;
  uint32_t count_ = 0;
  std::atomic<ncclResult_t> error_{ncclSuccess};
  std::vector<std::unique_ptr<Helper>> helpers_;
};

}  // namespace chorus
