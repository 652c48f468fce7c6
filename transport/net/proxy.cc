#include "transport/net/proxy.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "core/thread_name.h"

namespace chorus {

Proxy& Proxy::instance() {
  static Proxy* proxy = new Proxy();
  return *proxy;
}

void Proxy::add(ProxyConnection* conn) {
  std::lock_guard<std::mutex> life(lifecycle_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns_.push_back(conn);
    stop_ = false;
  }
  if (!thread_.joinable())
    thread_ = std::thread([this] {
      nameThisThread("NCCL Proxy");
      loop();
    });
}

void Proxy::remove(ProxyConnection* conn) {
  std::lock_guard<std::mutex> life(lifecycle_);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conns_.erase(std::remove(conns_.begin(), conns_.end(), conn), conns_.end());
    last = conns_.empty();
    stop_ = last;
  }
  if (last && thread_.joinable()) thread_.join();
}

bool Proxy::running() {
  std::lock_guard<std::mutex> life(lifecycle_);
  return thread_.joinable();
}

void Proxy::loop() {
  unsigned idleRounds = 0;
  for (;;) {
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      for (ProxyConnection* conn : conns_) moved |= conn->progress();
    }
    if (moved) {
      idleRounds = 0;
      continue;
    }
    ++idleRounds;
    if (idleRounds < 64) {
      __builtin_ia32_pause();
    } else if (idleRounds < 128) {
      sched_yield();
    } else {
      timespec nap{0, 50 * 1000};
      nanosleep(&nap, nullptr);
    }
  }
}

}  // namespace chorus
