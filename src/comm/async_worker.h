// AsyncWorker: the thread of a non-blocking communicator (config.blocking = 0).
// Calls hand it jobs and return ncclInProgress; ncclCommGetAsyncError reports
// ncclInProgress until the queue is drained.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace chorus {

class AsyncWorker {
 public:
  AsyncWorker();
  ~AsyncWorker();  // finishes queued jobs, then joins
  AsyncWorker(const AsyncWorker&) = delete;
  AsyncWorker& operator=(const AsyncWorker&) = delete;

  void submit(std::function<void()> job);
  bool idle();
  void waitIdle();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idleCv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace chorus
