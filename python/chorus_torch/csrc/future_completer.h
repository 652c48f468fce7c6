// FutureCompleter: completes works' futures, and so runs their callbacks, on threads of its
// own instead of the collective queues' threads, which must stay free: a callback may issue
// a collective and wait for it (PowerSGD's DDP comm hook does).
//
// Completions run in the order they were posted: a queue completes its jobs in the order
// they were issued, the same on every rank, so callbacks that issue collectives issue them in
// the same order on every rank too (a different order would be a call mismatch). One thread
// at a time holds that order; it passes it on
//   - when its completion ends (it then takes the next one itself), or
//   - when its completion issues a collective (onIssue): the callback has issued what comes
//     next in the order and may now wait for it, while the next completions run elsewhere;
//   - or when its completion has run for kStalled without either: it is taken to wait for
//     something else to complete first (a future of a later job), and the next completion
//     goes ahead, so no completion ever waits for good behind a blocked callback.
// A thread is started whenever completions are pending and no thread is idle (so one is
// always there to take over a stalled order); threads idle for a while end, down to one.
// Torch-free: completions are plain functions.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace chorus_torch {

class FutureCompleter {
 public:
  // Long enough that a callback computing before it issues (PowerSGD's matrix products)
  // keeps the order; a callback that waits without issuing delays the next ones this long.
  static constexpr std::chrono::milliseconds kStalled{1000};

  // The process's one completer (a child made by fork() gets a new one). Never destroyed:
  // its threads may be running a callback when the process exits.
  static FutureCompleter& instance();

  // Runs `completion` on one of the completer's threads, after those posted before it
  // (see the header comment).
  void post(std::function<void()> completion);

  // Called as a collective or send/recv is queued, from any thread: on a completer thread
  // whose completion holds the order, passes the order on. Cheap elsewhere.
  void onIssue();

  // Waits, until `deadline`, for every completion posted so far to have run, so that none
  // runs a callback while the interpreter shuts down (a group's shutdown calls it without
  // the GIL). False at the deadline. From a completer thread it returns at once.
  bool drain(std::chrono::steady_clock::time_point deadline);

  // Whether the calling thread is one of a completer's (a callback runs on it).
  static bool onCompleterThread();

  // Threads now alive, for tests.
  int threads() const;

 private:
  using Clock = std::chrono::steady_clock;
  FutureCompleter() = default;
  void serve();
  void startThreadLocked();  // mutex_ held
  bool mayTakeLocked(Clock::time_point now) const;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> pending_;
  int threads_ = 0;
  // Threads waiting (not running a completion): one at least while completions are
  // pending, to take over a stalled order.
  int idle_ = 0;
  bool orderHeld_ = false;  // a running completion holds the order
  uint64_t holder_ = 0;     // which: the number of the completion taken last
  Clock::time_point heldSince_{};
};

}  // namespace chorus_torch
