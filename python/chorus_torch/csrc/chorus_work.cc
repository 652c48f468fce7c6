#include "chorus_work.h"

#include <stdexcept>

namespace chorus_torch {

ChorusWork::ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void ChorusWork::complete(ncclResult_t result, const std::string& message) {
  // The work first: a caller woken by the future then finds the work completed too.
  if (result == ncclSuccess) {
    finish();
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  auto error = std::make_exception_ptr(std::runtime_error("chorus: " + message));
  finish(error);
  future_->setError(error);
}

}  // namespace chorus_torch
