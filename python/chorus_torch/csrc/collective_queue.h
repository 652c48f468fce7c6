// CollectiveQueue: one thread that owns one non-blocking Chorus communicator, issues its
// jobs in the order they were queued and waits for each. A chorus backend has one for its
// collectives and one per peer and direction for send/recv (see peer_channels.h), so
// Python's threads only queue: a gradient bucket's AllReduce runs while backward goes on,
// and a receive waiting for its sender holds up nothing but later receives from that
// sender. Torch-free: jobs are the NCCL calls and what to do when they end.
#pragma once

#include <atomic>
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
  // Makes the communicator on the queue's thread, before the first job: returns it joined
  // (ncclSuccess), or throws std::exception with the reason. `cancelled` turns true when
  // the queue is aborted or shut down; a connect that waits must give up then.
  using Connect = std::function<ncclComm_t(const std::function<bool()>& cancelled)>;

  // Takes ownership of `comm` (already joined).
  CollectiveQueue(ncclComm_t comm, std::chrono::milliseconds timeout);
  // Connects on its own thread; jobs queued meanwhile wait, and fail if it fails.
  CollectiveQueue(Connect connect, std::chrono::milliseconds timeout);
  ~CollectiveQueue();  // runs what is queued, then destroys (or aborts) the communicator
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // `timeout` bounds the job from its issue to its end (zero or less: the queue's).
  void push(std::string op, Issue issue, Finish finish, std::chrono::milliseconds timeout = {});
  // Jobs that must follow each other (one work done in several jobs): queued at once, so
  // no other thread's job comes between them; each has `timeout`.
  struct Step {
    std::string op;
    Issue issue;
    Finish finish;
  };
  void pushTogether(std::vector<Step> steps, std::chrono::milliseconds timeout = {});
  std::vector<JobTiming> timings() const;
  void setTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }
  // From any thread: the running job and every later one fail, and the queue's thread
  // revokes the communicator (its peers' waits end; the destructor aborts it).
  void abort(const std::string& why);
  // From any thread (without the GIL), before the caller shrinks the communicator with
  // NCCL_SHRINK_ABORT on its own thread: revokes it (ncclCommRevoke stops its work in
  // flight) unless a failure did already; from then on the queue's thread issues nothing
  // more on it, and the running job (whatever its communicator then says) and every later
  // one fail with `why`, once the work has stopped. The communicator is left to that
  // shrink, and aborted by the destructor.
  void revoke(const std::string& why);
  // The communicator given at construction (null for a queue that connects itself).
  ncclComm_t comm() const { return given_; }

  // Waits until the communicator has no work in progress: spins briefly, yields, then
  // naps a tenth of the time waited so far (50 µs to 1 ms). Returns its state (ncclSuccess or its error), or
  // ncclInProgress at `deadline` or once `cancelled` says so.
  static ncclResult_t awaitComm(ncclComm_t comm, Clock::time_point deadline,
                                const std::function<bool()>& cancelled = {});
  static double monotonicSeconds(Clock::time_point t);

 private:
  struct Job {
    std::string op;
    Issue issue;
    Finish finish;
    Clock::time_point queued;
    std::chrono::milliseconds timeout;
  };
  static constexpr size_t kTimingsKept = 4096;

  void loop(Connect connect);
  void run(Job& job);
  void fail(const std::string& why);
  void revokeComm();  // under issueMutex_
  bool aborted() const { return abortRequested_.load(); }

  const ncclComm_t given_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::atomic<int64_t> timeoutMs_;
  std::string failure_;  // set once the comm failed: every later job fails with it (queue thread only)
  std::atomic<bool> abortRequested_{false};
  std::string abortReason_;  // under mutex_
  // Held while the queue's thread issues a job's calls, and while revoke() and fail()
  // revoke the communicator.
  std::mutex issueMutex_;
  std::atomic<bool> revoked_{false};
  std::string revokeReason_;  // under issueMutex_
  bool commRevoked_ = false;  // ncclCommRevoke was called (under issueMutex_)
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
