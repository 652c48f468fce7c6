#include "collective_queue.h"

#include <sched.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "future_completer.h"

namespace chorus_torch {

std::string describeResult(ncclResult_t result) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') text += std::string(": ") + last;
  return text;
}

double CollectiveQueue::monotonicSeconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

ncclResult_t CollectiveQueue::awaitComm(ncclComm_t comm, Clock::time_point deadline,
                                        const std::function<bool()>& cancelled) {
  const Clock::time_point start = Clock::now();
  for (unsigned polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline || (cancelled && cancelled())) return ncclInProgress;
    if (polls < 64) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else if (polls < 192) {
      sched_yield();
    } else {
      // Naps a tenth of the time waited so far (50 µs to 1 ms): a long wait (a late peer)
      // then costs almost no CPU, and ends at most about 10 % later than it could.
      const auto tenth = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start) / 10;
      std::this_thread::sleep_for(std::clamp(tenth, std::chrono::microseconds(50), std::chrono::microseconds(1000)));
    }
  }
}

CollectiveQueue::CollectiveQueue(ncclComm_t comm, std::chrono::milliseconds timeout)
    : given_(comm), comm_(comm), timeoutMs_(timeout.count()), thread_([this] { loop({}); }) {}

CollectiveQueue::CollectiveQueue(Connect connect, std::chrono::milliseconds timeout)
    : timeoutMs_(timeout.count()), thread_([this, connect = std::move(connect)] { loop(connect); }) {}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (comm_ == nullptr) return;  // never joined
  if (!failure_.empty() || revoked_.load()) {
    ncclCommAbort(comm_);  // fail() revoked it, or a shrink did
    return;
  }
  if (ncclCommFinalize(comm_) == ncclInProgress) {
    awaitComm(comm_, Clock::now() + std::chrono::milliseconds(timeoutMs_.load()), [this] { return aborted(); });
  }
  if (aborted()) {
    ncclCommAbort(comm_);
  } else {
    ncclCommDestroy(comm_);
  }
}

void CollectiveQueue::push(std::string op, Issue issue, Finish finish, std::chrono::milliseconds timeout) {
  std::vector<Step> one;
  one.push_back(Step{std::move(op), std::move(issue), std::move(finish)});
  pushTogether(std::move(one), timeout);
}

void CollectiveQueue::pushTogether(std::vector<Step> steps, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Clock::time_point now = Clock::now();
    for (Step& step : steps)
      jobs_.push_back(Job{std::move(step.op), std::move(step.issue), std::move(step.finish), now, timeout});
  }
  wake_.notify_one();
  // Once queued (not before: the next completion's jobs must come after these), a callback
  // that issued passes the completions' order on.
  FutureCompleter::instance().onIssue();
}

std::vector<JobTiming> CollectiveQueue::timings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {timings_.begin(), timings_.end()};
}

void CollectiveQueue::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abortRequested_.load()) return;
    abortReason_ = why;
    abortRequested_.store(true);
  }
  wake_.notify_all();
}

void CollectiveQueue::revoke(const std::string& why) {
  std::lock_guard<std::mutex> lock(issueMutex_);
  if (revoked_.load()) return;
  revokeReason_ = why;
  // Set first: a revoke resets the communicator's state to success, which the running job's
  // wait must not take for its end. The job ends once the revoke below has stopped the
  // work (its revoked branch takes issueMutex_), so nothing frees its buffers earlier.
  revoked_.store(true);
  revokeComm();
}

void CollectiveQueue::revokeComm() {
  if (comm_ == nullptr || commRevoked_) return;
  ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT);
  commRevoked_ = true;
}

void CollectiveQueue::loop(Connect connect) {
  if (connect) {
    try {
      comm_ = connect([this] { return aborted(); });
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and everything queued has run
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    run(job);
    lock.lock();
  }
}

// A call that returns an error at once (a bad argument) fails its job only, as in NCCL;
// an error or a timeout while the work runs leaves the communicator unusable, so it is
// aborted (which also releases the peers waiting on it) and later jobs fail fast.
void CollectiveQueue::run(Job& job) {
  JobTiming timing{job.op, monotonicSeconds(job.queued), monotonicSeconds(Clock::now())};
  ncclResult_t result = ncclInvalidUsage;
  std::string message;
  if (failure_.empty() && aborted()) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail(abortReason_);
  }
  if (!failure_.empty()) {
    message = job.op + ": the communicator failed earlier: " + failure_;
  } else {
    const auto timeout = job.timeout.count() > 0 ? job.timeout : std::chrono::milliseconds(timeoutMs_.load());
    std::string revokedFor;  // a shrink's revoke: nothing more is issued
    std::string threw;
    {
      std::lock_guard<std::mutex> lock(issueMutex_);
      if (revoked_.load()) {
        revokedFor = revokeReason_;
      } else {
        try {
          result = job.issue(comm_);
        } catch (const std::exception& e) {  // e.g. a buffer the job could not allocate
          threw = e.what();
        }
      }
    }
    if (!threw.empty()) {
      // Other ranks may have issued theirs: the communicator fails, which ends their waits.
      message = job.op + " failed before its calls: " + threw;
      fail(message);
      result = ncclInternalError;
    } else if (!revokedFor.empty()) {
      failure_ = revokedFor;
      message = job.op + ": " + revokedFor;
    } else if (result != ncclSuccess && result != ncclInProgress) {
      message = job.op + " failed: " + describeResult(result);
    } else {
      result = awaitComm(comm_, Clock::now() + timeout, [this] { return aborted() || revoked_.load(); });
      if (revoked_.load()) {
        // Revoked while the job ran: a revoke resets the communicator's state to success, so
        // whatever it says now, the job may not have finished.
        std::lock_guard<std::mutex> lock(issueMutex_);
        result = ncclInvalidUsage;
        failure_ = revokeReason_;
        message = job.op + " was stopped: " + revokeReason_;
      } else if (result == ncclInProgress) {
        result = ncclSystemError;
        if (aborted()) {
          std::lock_guard<std::mutex> lock(mutex_);
          message = job.op + " was aborted: " + abortReason_;
        } else {
          // " Timed out " as PyTorch's backends say it (tests match it).
          message =
              job.op + ": Timed out after " + std::to_string(timeout.count()) + " ms; the communicator was aborted";
        }
        fail(message);
      } else if (result != ncclSuccess) {
        message = job.op + " failed: " + describeResult(result);
        fail(message);
      }
    }
  }
  timing.finished = monotonicSeconds(Clock::now());
  timing.ok = result == ncclSuccess;
  {
    // Recorded before the work completes: whoever waited for it then finds it listed.
    std::lock_guard<std::mutex> lock(mutex_);
    timings_.push_back(std::move(timing));
    if (timings_.size() > kTimingsKept) timings_.pop_front();
  }
  job.finish(result, message);
}

// Revoked rather than aborted, so that the communicator stays for a shrink with
// NCCL_SHRINK_ABORT (shrink_group past a failed rank); the destructor aborts it. The
// peers learn as from an abort: the revoke stops the work in flight, and work that fails
// marks its connections broken.
void CollectiveQueue::fail(const std::string& why) {
  failure_ = why;
  std::lock_guard<std::mutex> lock(issueMutex_);
  revokeComm();
}

}  // namespace chorus_torch
