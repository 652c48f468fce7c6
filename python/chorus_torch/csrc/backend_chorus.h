// ChorusBackend: torch.distributed's "chorus" backend (a c10d::Backend, PyTorch 2.x), for
// CPU tensors. Collectives run on one non-blocking Chorus communicator per group, made
// from a unique id that rank 0 puts in the group's store, on the group's CollectiveQueue;
// sends and receives run on a two-rank communicator per peer, direction and tag (PeerChannels).
// Every call checks its tensors at once (raising), stages non-contiguous ones through
// contiguous copies, queues its NCCL calls and returns a ChorusWork that completes when
// they are done.
#pragma once

#include <torch/extension.h>

#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "chorus_work.h"
#include "collective_queue.h"
#include "peer_channels.h"

namespace chorus_torch {

// The backend's options (what init_process_group(pg_options=...) and new_group take as
// chorus_torch.Options): the base's timeout, group name and global ranks.
struct ChorusOptions : c10d::Backend::Options {
  explicit ChorusOptions(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
      : c10d::Backend::Options("chorus", timeout) {}
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
    return c10::make_intrusive<ChorusOptions>(*this);
  }
};

class ChorusBackend final : public c10d::Backend {
 public:
  using Options = ChorusOptions;

  // `name`: what torch.distributed calls the backend ("chorus"), which names the profiler's
  // events ("chorus:all_reduce").
  ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, c10::intrusive_ptr<Options> options,
                std::string name = "chorus");
  // A group split from another (split()): `comm` is its communicator, already joined.
  ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, ncclComm_t comm, int rank, int size,
                c10::intrusive_ptr<Options> options, std::string name);
  ~ChorusBackend() override;  // runs the queued work, then destroys the communicators

  const std::string getBackendName() const override { return "chorus"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // A sparse COO tensor, ReduceOp.SUM only, as gloo (backend_sparse.cc); allreduce passes
  // sparse tensors here.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  // dist.gather_single: the root's output is one contiguous tensor of world size x input.
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // startCoalescing .. endCoalescing: the collectives between them run as one NCCL group
  // (one job of the group's queue), the sends and receives start at once on their
  // channels; endCoalescing's work completes when all of them have.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // The number of collectives this rank has called on the group (sends and receives,
  // which involve only some ranks, are not counted), as ProcessGroupNCCL counts.
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

  // split_group: every rank of this group calls it, in the same order as its collectives;
  // `ranks` (this group's ranks, in the new group's order) is the caller's part. The new
  // group's communicator is ncclCommSplit of this one, issued on this group's queue:
  // color the part's lowest rank (parts do not overlap), key the position in `ranks`; a
  // rank outside `ranks` splits with NCCL_SPLIT_NOCOLOR and gets no group (nullptr).
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  // shrink_group: the ranks that stay call it, in the same order as their collectives.
  // SHRINK_DEFAULT: ncclCommShrink issued on this group's queue, ordered with its
  // collectives. SHRINK_ABORT (past a dead or silent rank): the queue stops, the work in
  // flight fails, and ncclCommShrink with NCCL_SHRINK_ABORT runs on the caller's thread.
  // This group can then only be destroyed (PyTorch does).
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  // Pending and later calls fail; work in flight stops (its communicator is revoked) and
  // the communicators are aborted when the group is destroyed.
  void abort() override;
  void shutdown() override;  // runs what is queued, destroys the communicators; later calls raise

  std::vector<JobTiming> timings() const;

 private:
  // One NCCL call of a job, and what must follow it on the queue's thread once the job
  // succeeded (copying results out of staging buffers, combining, freeing an op).
  struct Call {
    CollectiveQueue::Issue issue;
    std::function<void()> after;
  };
  // The collectives recorded between startCoalescing and endCoalescing.
  struct Coalesced {
    std::vector<Call> calls;
    std::vector<c10::intrusive_ptr<ChorusWork>> works;  // one per collective of the block
    std::vector<at::Tensor> outputs;                    // theirs
    c10::intrusive_ptr<ChorusWork> all;                 // what endCoalescing returns
    std::chrono::milliseconds timeout{0};
  };

  // Queues the calls as one job of the group's queue (one NCCL group when several), or
  // records them while coalescing.
  c10::intrusive_ptr<c10d::Work> collective(const char* op, c10d::OpType type, const std::vector<at::Tensor>& inputs,
                                            std::vector<at::Tensor> outputs, std::vector<Call> calls,
                                            std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> pointToPoint(const char* op, c10d::OpType type, const at::Tensor& tensor, int peer,
                                              int tag, bool sending);

  // The calls of one reduction (allreduce root -1, reduce), in place on `tensor`.
  std::vector<Call> reductionCalls(const char* op, const at::Tensor& tensor, const c10d::ReduceOp& reduceOp, int root);
  // reduce_scatter from one input of world size x output elements.
  std::vector<Call> reduceScatterCalls(const char* op, const at::Tensor& output, const at::Tensor& input,
                                       const c10d::ReduceOp& reduceOp);
  // all_gather of `input` into `blocks` (world size tensors shaped like it).
  Call allgatherCall(const at::Tensor& input, const std::vector<at::Tensor>& blocks);

  // The one list of world size tensors a call takes, each matching `sample`.
  std::vector<at::Tensor> worldList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& sample,
                                    const char* op) const;
  // gather's and scatter's list: worldList at the root; elsewhere there is none.
  std::vector<at::Tensor> rootBlocks(const std::vector<std::vector<at::Tensor>>& lists, int root,
                                     const at::Tensor& sample, const char* op) const;
  // A split's or shrink's options: `opts` where they are chorus', else this group's with
  // what another backend's say.
  c10::intrusive_ptr<Options> childOptions(const c10::intrusive_ptr<c10d::Backend::Options>& opts) const;
  static std::string awaitChild(ncclComm_t child, std::chrono::milliseconds timeout, const std::string& failure);
  std::string onQueue(const char* op, std::chrono::milliseconds timeout, CollectiveQueue::Issue issue);
  void checkOpen(const char* op) const;
  void close();

  c10::intrusive_ptr<Options> options_;
  const std::string name_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<uint64_t> sequence_{0};
  std::atomic<uint64_t> p2pSequence_{0};
  uint64_t monitoredBarriers_ = 0;
  uint64_t shrinks_ = 0;  // names each shrunk group's store prefix
  std::mutex coalescingMutex_;
  std::unique_ptr<Coalesced> coalescing_;  // set between startCoalescing and endCoalescing
  std::atomic<bool> closed_{false};
  std::unique_ptr<CollectiveQueue> queue_;
  std::unique_ptr<PeerChannels> peers_;
};

}  // namespace chorus_torch
