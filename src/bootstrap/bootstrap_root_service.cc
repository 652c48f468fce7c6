// The process's root thread: one thread serves every root this process started (every
// outstanding ncclGetUniqueId, NCCL_COMM_ID roots, the roots of split communicators), so an
// id nobody uses costs its listening socket until its timeout and no thread of its own.
// The thread starts with the first root and ends when the last one finishes.
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "core/thread_name.h"
#include "src/bootstrap/bootstrap_root.h"

namespace chorus {
namespace {

class RootService;
RootService* theService = nullptr;  // for the fork handlers, which take no argument

class RootService {
 public:
  static RootService& instance() {
    // Never destroyed: the detached thread may still be polling while the process exits.
    static RootService* service = [] {
      theService = new RootService;
      pthread_atfork([] { theService->mutex_.lock(); }, [] { theService->mutex_.unlock(); },
                     [] { theService->forgetAfterFork(); });
      return theService;
    }();
    return *service;
  }

  ncclResult_t add(std::unique_ptr<RootServer> root) {
    std::lock_guard<std::mutex> lock(mutex_);
    roots_.push_back(std::move(root));
    if (running_) {
      const uint64_t one = 1;
      if (write(wakeFd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        // Only a delay: the thread looks for new roots at its next wake-up anyway.
        INFO(kSubsysBootstrap, "Bootstrap: could not wake the root thread: %s", strerror(errno));
      }
      return ncclSuccess;
    }
    wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakeFd_ < 0) {
      WARN("Bootstrap: eventfd() for the root thread failed: %s", strerror(errno));
      roots_.pop_back();
      return ncclSystemError;
    }
    try {
      std::thread([this] { serve(); }).detach();
    } catch (const std::system_error& e) {
      WARN("Bootstrap: cannot start the root thread: %s", e.what());
      roots_.pop_back();
      closeWakeFd();
      return ncclSystemError;
    }
    running_ = true;
    return ncclSuccess;
  }

 private:
  // Polls without the lock; looks at the roots only with it, so add() and a fork (whose
  // handler takes the lock) always find them whole.
  void serve() {
    nameThisThread("NCCL Root");
    std::vector<pollfd> fds;
    std::vector<size_t> firstFd;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (roots_.empty()) {  // the last root finished: so does the thread, under the lock add() takes
        running_ = false;
        closeWakeFd();
        return;
      }
      fds.assign(1, pollfd{wakeFd_, POLLIN, 0});
      firstFd.clear();
      int timeoutMs = 60 * 1000;
      for (const auto& root : roots_) {
        firstFd.push_back(fds.size());
        root->appendPollFds(&fds);
        timeoutMs = std::min(timeoutMs, root->nextWakeMs());
      }
      const int wakeFd = wakeFd_;
      lock.unlock();
      if (poll(fds.data(), fds.size(), timeoutMs) < 0) {
        if (errno != EINTR) {
          WARN("Bootstrap: the root thread's poll failed: %s", strerror(errno));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no hot loop if it keeps failing
        }
        // Serve the roots anyway (nothing ready): their deadlines still pass and end them.
        for (pollfd& fd : fds) fd.revents = 0;
      }
      if (fds[0].revents != 0) {
        uint64_t count = 0;
        (void)!read(wakeFd, &count, sizeof(count));
      }
      lock.lock();
      // Roots added meanwhile come after these and were not polled: the next round has them.
      for (size_t i = firstFd.size(); i-- > 0;) {
        if (!roots_[i]->serve(&fds[firstFd[i]])) roots_.erase(roots_.begin() + i);
      }
    }
  }

  void closeWakeFd() {
    if (wakeFd_ >= 0) ::close(wakeFd_);
    wakeFd_ = -1;
  }

  // A forked child has no root thread, and the parent's roots are the parent's to serve: the
  // child closes its copies of their sockets and starts a thread of its own for the roots it
  // makes.
  void forgetAfterFork() {
    // Quietly: another thread of the parent may have held the log's lock when it forked.
    for (auto& root : roots_) root->abandon();
    roots_.clear();
    closeWakeFd();
    running_ = false;
    mutex_.unlock();
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<RootServer>> roots_;  // the open roots; changed only under mutex_
  bool running_ = false;
  int wakeFd_ = -1;  // the thread's wake-up when a root is added; open while it runs
};

}  // namespace

ncclResult_t startBootstrapRoot(Socket listener, uint64_t secret) {
  return RootService::instance().add(
      std::make_unique<RootServer>(std::move(listener), secret, bootstrapTimeoutSeconds()));
}

}  // namespace chorus
