// ChorusWork: what a chorus backend call returns. It completes on a CollectiveQueue
// thread; wait() raises Chorus' error message, and getFuture() (what DDP waits on)
// carries the output tensors. A work may stand for several parts (the calls of a
// coalesced block, or the sends and receives of batch_isend_irecv): it completes when
// the last part does, with the first part's error if any failed.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "nccl.h"

namespace chorus_torch {

class ChorusWork final : public c10d::Work {
 public:
  ChorusWork(int rank, c10d::OpType type, uint64_t sequence, std::vector<at::Tensor> outputs, int parts = 1);

  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }

  // One more part (and its outputs) that must complete before this work does.
  void addPart(const std::vector<at::Tensor>& outputs);
  // From a queue's thread, once per part: the last completes the work (wakes wait()),
  // then the future.
  void complete(ncclResult_t result, const std::string& message);

 private:
  const uint64_t sequence_;
  std::vector<at::Tensor> outputs_;  // under partsMutex_
  std::mutex partsMutex_;
  int pending_;
  std::string error_;  // the first failed part's message
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace chorus_torch
