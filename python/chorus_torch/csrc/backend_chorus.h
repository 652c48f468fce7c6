// ProcessGroupChorus: torch.distributed's "chorus" backend, for CPU tensors. One
// non-blocking Chorus communicator per group, made from a unique id that rank 0 puts in
// the group's store. Every call checks its tensors at once (raising), then queues its
// NCCL calls on the group's CollectiveQueue and returns a ChorusWork that completes
// when they are done.
#pragma once

#include <torch/extension.h>

#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "collective_queue.h"

namespace chorus_torch {

class ProcessGroupChorus final : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;  // runs the queued work, then destroys the communicator

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  std::vector<JobTiming> timings() const { return queue_->timings(); }

 private:
  using Issue = CollectiveQueue::Issue;
  // The NCCL call of a reduction, given the op to use (a PreMulSum op is made for it).
  using ReduceCall = std::function<ncclResult_t(ncclRedOp_t, ncclComm_t)>;

  c10::intrusive_ptr<c10d::Work> enqueue(const char* op, c10d::OpType type, std::vector<at::Tensor> outputs,
                                         Issue issue, std::function<void()> after = {});
  // allreduce and reduce: in place on `tensor`; with a bitwise op all ranks gather and
  // combine, and only `root` (-1: every rank) keeps the result.
  c10::intrusive_ptr<c10d::Work> reduceInPlace(const char* op, c10d::OpType type, const at::Tensor& tensor,
                                               const c10d::ReduceOp& reduceOp, int root);
  // reduce_scatter from one contiguous input of world size x output elements.
  c10::intrusive_ptr<c10d::Work> reduceScatterFlat(const char* op, c10d::OpType type, at::Tensor output,
                                                   at::Tensor input, const c10d::ReduceOp& reduceOp);

  // The one list of world size tensors a call takes, each matching `sample`.
  std::vector<at::Tensor> worldList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& sample,
                                    const char* op) const;
  // gather's and scatter's list: worldList at the root; elsewhere there is none.
  std::vector<at::Tensor> rootBlocks(const std::vector<std::vector<at::Tensor>>& lists, int root,
                                     const at::Tensor& sample, const char* op) const;

  std::unique_ptr<CollectiveQueue> queue_;
};

}  // namespace chorus_torch
