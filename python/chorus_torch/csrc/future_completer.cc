#include "future_completer.h"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <system_error>
#include <thread>

namespace chorus_torch {

namespace {
// How long a thread beyond the first waits for work before it ends.
constexpr std::chrono::seconds kIdleEnd{10};
// The completion this thread runs while it holds the order (0: none).
thread_local uint64_t tHolding = 0;
thread_local bool tCompleterThread = false;

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

bool FutureCompleter::drain(Clock::time_point deadline) {
  if (tCompleterThread) return true;  // it would wait for its own completion
  std::unique_lock<std::mutex> lock(mutex_);
  return wake_.wait_until(lock, deadline, [this] { return pending_.empty() && idle_ == threads_; });
}

bool FutureCompleter::onCompleterThread() { return tCompleterThread; }

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
  try {
    std::thread([this] { serve(); }).detach();
  } catch (const std::system_error& e) {  // the threads there are go on; a stalled order may wait
    std::fprintf(stderr, "chorus: could not start a thread for works' futures: %s\n", e.what());
    return;
  }
  ++threads_;
  ++idle_;  // idle from now (it takes the lock before it looks): a second post needs no second thread
}

bool FutureCompleter::mayTakeLocked(Clock::time_point now) const {
  return !pending_.empty() && (!orderHeld_ || now - heldSince_ >= kStalled);
}

void FutureCompleter::serve() {
  tCompleterThread = true;
  std::unique_lock<std::mutex> lock(mutex_);
  Clock::time_point idleSince = Clock::now();
  for (;;) {  // idle_ counts this thread here
    const Clock::time_point now = Clock::now();
    if (!mayTakeLocked(now)) {
      if (!pending_.empty()) {
        wake_.wait_until(lock, heldSince_ + kStalled);  // the order is held: until it counts as stalled
      } else if (threads_ == 1) {
        wake_.wait(lock);  // the last thread stays, without a deadline
      } else if (now - idleSince >= kIdleEnd) {
        break;
      } else {
        wake_.wait_until(lock, idleSince + kIdleEnd);
      }
      continue;
    }
    std::function<void()> completion = std::move(pending_.front());
    pending_.pop_front();
    --idle_;
    // Someone must be left to take the next one should this callback block for good.
    if (!pending_.empty() && idle_ == 0) startThreadLocked();
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
