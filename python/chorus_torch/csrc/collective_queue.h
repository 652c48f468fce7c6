// CollectiveQueue: the one thread of a chorus process group that issues its collectives
// on a non-blocking Chorus communicator, in the order they were queued, and waits for
// each. Python's threads only queue, so a gradient bucket's AllReduce runs while
// backward goes on. Torch-free: jobs are the NCCL calls and what to do when they end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace chorus_torch {

using Clock = std::chrono::steady_clock;

// When a job was queued, issued and finished, in seconds of CLOCK_MONOTONIC (what
// Python's time.monotonic() reads), for tests and debugging.
struct JobTiming {
  std::string op;
  double queued = 0;
  double started = 0;
  double finished = 0;
  bool ok = false;
};

class CollectiveQueue {
 public:
  // The NCCL calls of one job; may return ncclInProgress (the communicator is non-blocking).
  using Issue = std::function<ncclResult_t(ncclComm_t)>;
  // Called on the queue's thread once the calls are done: ncclSuccess, or the error and
  // a message that names the call, the result and Chorus' last error text.
  using Finish = std::function<void(ncclResult_t, const std::string&)>;

  // Takes ownership of `comm`; `timeout` bounds each job (then the comm is aborted).
  CollectiveQueue(ncclComm_t comm, std::chrono::milliseconds timeout);
  ~CollectiveQueue();  // runs what is queued, then destroys (or aborts) the communicator
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  void push(std::string op, Issue issue, Finish finish);
  std::vector<JobTiming> timings() const;

  // Waits until the communicator has no work in progress: spins briefly, yields, then
  // naps. Returns its state (ncclSuccess or its error), or ncclInProgress at `deadline`.
  static ncclResult_t awaitComm(ncclComm_t comm, Clock::time_point deadline);
  static double monotonicSeconds(Clock::time_point t);

 private:
  struct Job {
    std::string op;
    Issue issue;
    Finish finish;
    Clock::time_point queued;
  };
  static constexpr size_t kTimingsKept = 4096;

  void loop();
  void run(Job& job);
  void fail(const std::string& why);

  ncclComm_t comm_;
  const std::chrono::milliseconds timeout_;
  std::string failure_;  // set once the comm failed: every later job fails with it
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  std::deque<JobTiming> timings_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

// "ncclRemoteError (remote process exited or there was a network error): <Chorus' text>"
std::string describeResult(ncclResult_t result);

}  // namespace chorus_torch
