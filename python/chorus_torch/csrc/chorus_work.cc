#include "chorus_work.h"

#include <stdexcept>

namespace chorus_torch {

ChorusWork::ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void ChorusWork::complete(ncclResult_t result, const std::string& message) {
  if (result == ncclSuccess) {
    future_->markCompleted(c10::IValue(outputs_));
    finish();
    return;
  }
  auto error = std::make_exception_ptr(std::runtime_error("chorus: " + message));
  future_->setError(error);
  finish(error);
}

}  // namespace chorus_torch
