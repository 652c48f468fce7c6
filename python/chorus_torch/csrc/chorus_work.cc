#include "chorus_work.h"

#include <stdexcept>

namespace chorus_torch {

ChorusWork::ChorusWork(int rank, c10d::OpType type, uint64_t sequence, std::vector<at::Tensor> outputs, int parts)
    : c10d::Work(rank, type),
      sequence_(sequence),
      outputs_(std::move(outputs)),
      pending_(parts),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

std::vector<at::Tensor> ChorusWork::result() {
  std::lock_guard<std::mutex> lock(partsMutex_);
  return outputs_;
}

void ChorusWork::addPart(const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(partsMutex_);
  ++pending_;
  outputs_.insert(outputs_.end(), outputs.begin(), outputs.end());
}

void ChorusWork::complete(ncclResult_t result, const std::string& message) {
  std::vector<at::Tensor> outputs;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(partsMutex_);
    if (result != ncclSuccess && error_.empty()) error_ = message.empty() ? std::string("failed") : message;
    if (--pending_ > 0) return;
    outputs = outputs_;
    error = error_;
  }
  // The work first: a caller woken by the future then finds the work completed too.
  if (error.empty()) {
    finish();
    future_->markCompleted(c10::IValue(outputs));
    return;
  }
  auto exception = std::make_exception_ptr(std::runtime_error("chorus: " + error));
  finish(exception);
  future_->setError(exception);
}

}  // namespace chorus_torch
