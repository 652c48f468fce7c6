#include "future_completer.h"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <thread>

namespace chorus_torch {

namespace {
// How long a thread beyond the first waits for work before it ends.
constexpr std::chrono::seconds kIdleEnd{10};
// The completion this thread runs while it holds the order (0: none).
thread_local uint64_t tHolding = 0;

// The process's completer: never destroyed (see the header). A child made by fork() has
// none of its parent's threads, so it starts with a completer of its own.
std::atomic<FutureCompleter*>& current() {
  static std::atomic<FutureCompleter*> completer{nullptr};
  return completer;
}
}  // namespace

FutureCompleter& FutureCompleter::instance() {
  static const bool made = [] {
    current().store(new FutureCompleter());
    pthread_atfork(nullptr, nullptr, [] { current().store(new FutureCompleter()); });
    return true;
  }();
  (void)made;
  return *current().load();
}

void FutureCompleter::post(std::function<void()> completion) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(completion));
    if (idle_ == 0) startThreadLocked();  // every thread runs a callback, which may be blocked
  }
  wake_.notify_all();
}

void FutureCompleter::onIssue() {
  if (tHolding == 0) return;  // not a completer thread, or its completion holds no order
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (orderHeld_ && holder_ == tHolding) orderHeld_ = false;
    tHolding = 0;
    if (!pending_.empty() && idle_ == 0) startThreadLocked();
  }
  wake_.notify_all();
}

int FutureCompleter::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_;
}

void FutureCompleter::startThreadLocked() {
  ++threads_;
  ++idle_;  // counted idle from now: a second post needs no second thread
  std::thread([this] { serve(); }).detach();
}

bool FutureCompleter::mayTakeLocked(Clock::time_point now) const {
  return !pending_.empty() && (!orderHeld_ || now - heldSince_ >= kStalled);
}

void FutureCompleter::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  Clock::time_point idleSince = Clock::now();
  for (;;) {  // idle_ counts this thread here
    const Clock::time_point now = Clock::now();
    if (!mayTakeLocked(now)) {
      if (pending_.empty() && now - idleSince >= kIdleEnd && threads_ > 1) break;
      // Until the order is free, or until its holder counts as stalled.
      const Clock::time_point until = pending_.empty() ? idleSince + kIdleEnd
                                      : orderHeld_     ? heldSince_ + kStalled
                                                       : now;
      wake_.wait_until(lock, until);
      continue;
    }
    std::function<void()> completion = std::move(pending_.front());
    pending_.pop_front();
    --idle_;
    const uint64_t mine = ++holder_;  // a stalled holder's order is taken over
    orderHeld_ = true;
    heldSince_ = Clock::now();
    tHolding = mine;
    lock.unlock();
    try {
      completion();                      // the future's callbacks run here
    } catch (const std::exception& e) {  // a future's callbacks catch their own; a last guard
      std::fprintf(stderr, "chorus: a work's completion raised: %s\n", e.what());
    }
    completion = nullptr;  // what it holds goes before the lock is taken again
    tHolding = 0;
    lock.lock();
    if (orderHeld_ && holder_ == mine) orderHeld_ = false;
    ++idle_;
    idleSince = Clock::now();
    wake_.notify_all();
  }
  --idle_;
  --threads_;
}

}  // namespace chorus_torch
