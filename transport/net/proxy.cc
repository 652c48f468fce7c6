#include "transport/net/proxy.h"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"
#include "core/futex.h"
#include "core/thread_name.h"

namespace chorus {
namespace {

// Idle, the thread yields until it has been idle this long, then sleeps. No spin: each
// round is already a poll of every connection, syscalls included, and a spinning proxy
// keeps a woken thread of another rank off the core (4 ranks over TCP on 2 cores: 8 B
// AllReduce 1 ms with 64 spinning rounds, 150 µs without; BENCHMARKS.md). Time, not
// rounds: on a busy host one yield can last 100 µs.
constexpr auto kSleepAfter = std::chrono::microseconds(50);

}  // namespace

namespace {

// The process's proxy. A child made by fork() gets a proxy of its own: its copy of the
// parent's has no thread (fork copies only the forking thread) but says it has, holds the
// parent's connections, and may have been locked by the parent's proxy thread. That copy
// is left alone, never destroyed (its thread object would end the program).
std::atomic<Proxy*> gProxy{nullptr};
[[maybe_unused]] const int gProxyForkHandler = pthread_atfork(nullptr, nullptr, [] { gProxy.store(nullptr); });

}  // namespace

Proxy& Proxy::instance() {
  Proxy* proxy = gProxy.load(std::memory_order_acquire);
  if (proxy != nullptr) return *proxy;
  // No lock a fork could leave taken: the first of racing callers installs its proxy (one
  // not started yet costs nothing to delete).
  auto* made = new Proxy();
  if (gProxy.compare_exchange_strong(proxy, made, std::memory_order_acq_rel)) return *made;
  delete made;
  return *proxy;
}

void Proxy::add(ProxyConnection* conn) {
  std::lock_guard<std::mutex> life(lifecycle_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns_.push_back(conn);
    stop_ = false;
  }
  if (thread_.joinable()) {
    ring();  // a sleeping proxy takes the new connection in now
    return;
  }
  // Without a doorbell the thread never sleeps (it naps): slower to wake, still correct.
  doorbell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell_ < 0)
    WARN("NET proxy: eventfd() failed: %s; the proxy thread will nap instead of sleep", strerror(errno));
  const long sleepMaxUs = doorbell_ < 0 ? 0 : envIntInRange("CHORUS_WAIT_SLEEP_US", 10000, 0, INT64_MAX);
  thread_ = std::thread([this, sleepMaxUs] {
    nameThisThread("NCCL Proxy");
    loop(sleepMaxUs);
  });
}

void Proxy::remove(ProxyConnection* conn) {
  std::lock_guard<std::mutex> life(lifecycle_);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns_.erase(std::remove(conns_.begin(), conns_.end(), conn), conns_.end());
    conn->announceSleep(0);  // a sleeping proxy no longer clears it
    last = conns_.empty();
    stop_ = last;
  }
  if (!thread_.joinable()) return;
  ring();  // out of poll(), which may be watching `conn`'s sockets
  if (!last) return;
  thread_.join();
  if (doorbell_ >= 0) close(doorbell_);
  doorbell_ = -1;
}

void Proxy::addCtrlSink(ProxyCtrlSink* sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  ctrlSinks_.push_back(sink);
}

void Proxy::removeCtrlSink(ProxyCtrlSink* sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  ctrlSinks_.erase(std::remove(ctrlSinks_.begin(), ctrlSinks_.end(), sink), ctrlSinks_.end());
}

void Proxy::tellSinks(ProxyCtrlState state) {
  for (ProxyCtrlSink* sink : ctrlSinks_) sink->proxyState(state);
}

bool Proxy::running() {
  std::lock_guard<std::mutex> life(lifecycle_);
  return thread_.joinable();
}

void Proxy::ring() {
  if (doorbell_ >= 0) eventfd_write(doorbell_, 1);
}

void Proxy::loop(long sleepMaxUs) {
  bool idle = false;
  std::chrono::steady_clock::time_point idleSince;
  for (;;) {
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      for (ProxyConnection* conn : conns_) moved |= conn->progress();
      if (moved == idle && !ctrlSinks_.empty()) tellSinks(moved ? ProxyCtrlState::Active : ProxyCtrlState::Idle);
    }
    if (moved) {
      idle = false;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!idle) {
      idle = true;
      idleSince = now;
    }
    if (now - idleSince < kSleepAfter) {
      sched_yield();
    } else if (sleepMaxUs == 0 || !sleep(sleepMaxUs)) {
      const timespec nap = timespecOfUs(50);
      nanosleep(&nap, nullptr);
    }
  }
}

bool Proxy::sleep(long us) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return true;
    // Announced first, then the last look: an executor's publish before the announcement
    // shows in this progress(), one after it rings the doorbell (CpuExec::wakeSleepers).
    for (ProxyConnection* conn : conns_) conn->announceSleep(static_cast<uint32_t>(doorbell_) + 1);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    bool moved = false;
    for (ProxyConnection* conn : conns_) moved |= conn->progress();
    // What to wait for is taken after the last look, which may have changed it (a message's
    // header arrived: now its data is awaited).
    waitFds_.assign(1, pollfd{doorbell_, POLLIN, 0});
    bool waitable = true;
    for (ProxyConnection* conn : conns_) waitable = waitable && conn->waitSet(&waitFds_);
    if (moved || !waitable) {
      for (ProxyConnection* conn : conns_) conn->announceSleep(0);
      return moved || waitable;  // back to work (something moved, or will soon); false: nothing to sleep on, nap
    }
    if (!ctrlSinks_.empty()) tellSinks(ProxyCtrlState::Sleep);
  }
  // Unlocked: add() and remove() ring the doorbell, so a sleep never delays them.
  const timespec limit = timespecOfUs(us);
  ppoll(waitFds_.data(), waitFds_.size(), &limit, nullptr);
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  eventfd_t rings = 0;
  eventfd_read(doorbell_, &rings);  // non-blocking: clears what rang
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ctrlSinks_.empty()) tellSinks(ProxyCtrlState::Wakeup);
  // Connections added meanwhile never announced; clearing theirs is harmless.
  for (ProxyConnection* conn : conns_) conn->announceSleep(0);
  return true;
}

}  // namespace chorus
