// ChorusWork: what a chorus process group call returns. It completes on the group's
// CollectiveQueue thread; wait() raises Chorus' error message, and getFuture() (what DDP
// waits on) carries the output tensors.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "nccl.h"

namespace chorus_torch {

class ChorusWork final : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // From the queue's thread: completes the work (wakes wait()), then the future.
  void complete(ncclResult_t result, const std::string& message);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace chorus_torch
