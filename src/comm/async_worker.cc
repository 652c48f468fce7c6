#include "src/comm/async_worker.h"

namespace chorus {

AsyncWorker::AsyncWorker() : thread_([this] { loop(); }) {}

AsyncWorker::~AsyncWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void AsyncWorker::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

bool AsyncWorker::idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.empty() && !busy_;
}

void AsyncWorker::waitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idleCv_.wait(lock, [this] { return jobs_.empty() && !busy_; });
}

void AsyncWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    job();
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idleCv_.notify_all();
  }
}

}  // namespace chorus
