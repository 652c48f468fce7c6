// ChorusWork: what a chorus backend call returns. It completes on a CollectiveQueue
// thread; wait() raises Chorus' error message, and getFuture() (what DDP waits on)
// carries the output tensors, completed right after on a FutureCompleter thread
// (future_completer.h), where its callbacks run. A work may stand for several parts (the calls of a
// coalesced block, or the sends and receives of batch_isend_irecv): it completes when
// the last part does, with the first part's error if any failed.
#pragma once

#include <torch/extension.h>

#include <atomic>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "nccl.h"

namespace chorus_torch {

// "<backend>:<op>" as PyTorch's backends name their works' profiler events (gloo:all_reduce),
// for `prefix` (the name the backend is registered under) and `type`. The string lives for good.
const char* profilingTitle(const std::string& prefix, c10d::OpType type);

class ChorusWork final : public c10d::Work {
 public:
  // `profilingTitle` (a string that lives for good, or null) names the work's event when
  // the profiler is on ("chorus:all_reduce"), `inputs` give its shapes.
  ChorusWork(int rank, c10d::OpType type, uint64_t sequence, std::vector<at::Tensor> outputs, int parts = 1,
             const char* profilingTitle = nullptr, const std::vector<at::Tensor>& inputs = {});

  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }

  // Raises instead of waiting while the work is held in an open coalescing block: the
  // block's calls are issued only at its end, so waiting inside the block never returns.
  // Returns once the future is completed too (as gloo's): after wait() or isCompleted(),
  // get_future().value() holds the result (a callback's wait() does not wait for that);
  // a wait with a time-out waits for the future only until it expires.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  bool isCompleted() override;
  // A receive's sender (as gloo's recv works tell); other works raise, as the base does.
  int sourceRank() const override { return sourceRank_ >= 0 ? sourceRank_ : c10d::Work::sourceRank(); }
  void setSourceRank(int rank) { sourceRank_ = rank; }
  // Whether the work's calls are held in an open coalescing block (set when recorded there,
  // cleared when the block ends or is dropped).
  void setHeldInBlock(bool held) { heldInBlock_ = held; }

  // One more part (and its outputs) that must complete before this work does.
  void addPart(const std::vector<at::Tensor>& outputs);
  // From a queue's thread, once per part: the last completes the work (wakes wait()),
  // then hands the future to the completer.
  void complete(ncclResult_t result, const std::string& message);

 private:
  void settle(bool unbounded, std::chrono::steady_clock::time_point deadline);

  const uint64_t sequence_;
  std::atomic<bool> heldInBlock_{false};
  int sourceRank_ = -1;
  std::vector<at::Tensor> outputs_;  // under partsMutex_
  std::mutex partsMutex_;
  int pending_;
  std::string error_;  // the first failed part's message
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace chorus_torch
