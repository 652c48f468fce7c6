// The collectives of ChorusBackend (backend_chorus.h): each checks its tensors at once
// (raising), stages non-contiguous ones, and hands its NCCL calls to collective().
#include <memory>

#include "backend_chorus.h"
#include "tensor_types.h"

namespace chorus_torch {

namespace {

// The blocks one after another, in one contiguous tensor (what NCCL reads).
at::Tensor concatenated(const std::vector<at::Tensor>& blocks) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& block : blocks) flat.push_back(block.reshape(-1));
  return at::cat(flat);
}

// Copies block i of `flat` (rank-major, blocks shaped like blocks[i]) into blocks[i].
void scatterBlocks(const at::Tensor& flat, const std::vector<at::Tensor>& blocks) {
  const at::Tensor rows = flat.view({static_cast<int64_t>(blocks.size()), -1});
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].copy_(rows[static_cast<int64_t>(i)].view(blocks[i].sizes()));
}

// A PreMulSum op lives from its collective's issue until the collective is done; after a
// failure the communicator is aborted, which frees it with everything else.
struct PreMulSumOp {
  ncclComm_t comm = nullptr;
  ncclRedOp_t op{};
  bool live = false;
};

// The issue of a reduction and what must follow it once it is done.
std::pair<CollectiveQueue::Issue, std::function<void()>> reductionSteps(
    const Reduction& r, std::function<ncclResult_t(ncclRedOp_t, ncclComm_t)> call) {
  if (r.kind != Reduction::Kind::PreMulSum) {
    return {[call, op = r.op](ncclComm_t comm) { return call(op, comm); }, {}};
  }
  auto premul = std::make_shared<PreMulSumOp>();
  auto issue = [premul, call, r](ncclComm_t comm) {
    at::Tensor factor = at::scalar_tensor(r.factor, at::TensorOptions().dtype(r.computeType));
    ncclResult_t result =
        ncclRedOpCreatePreMulSum(&premul->op, factor.data_ptr(), r.type, ncclScalarHostImmediate, comm);
    if (result != ncclSuccess) return result;
    result = call(premul->op, comm);
    if (result == ncclSuccess || result == ncclInProgress) {
      premul->comm = comm;
      premul->live = true;
    } else {
      ncclRedOpDestroy(premul->op, comm);
    }
    return result;
  };
  auto after = [premul] {
    if (premul->live) ncclRedOpDestroy(premul->op, premul->comm);
  };
  return {issue, after};
}

// One send or receive of a grouped exchange.
struct Transfer {
  int peer;
  void* data;
  size_t bytes;
  bool sending;
};

// The transfers as one NCCL group; an error inside still closes the group.
ncclResult_t exchange(const std::vector<Transfer>& transfers, ncclComm_t comm) {
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  for (const Transfer& t : transfers) {
    if (result != ncclSuccess || t.bytes == 0) continue;  // both sides skip an empty block
    result = t.sending ? ncclSend(t.data, t.bytes, ncclUint8, t.peer, comm, nullptr)
                       : ncclRecv(t.data, t.bytes, ncclUint8, t.peer, comm, nullptr);
  }
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess ? result : end;
}

// Byte sizes of `splits` rows each; equal rows per rank when `splits` is empty.
std::vector<size_t> blockBytes(const at::Tensor& tensor, const std::vector<int64_t>& splits, int ranks,
                               const char* which) {
  TORCH_CHECK(tensor.dim() >= 1, "chorus: alltoall_base: the ", which, " tensor needs a first dimension to split");
  const int64_t rows = tensor.size(0);
  const size_t rowBytes = rows == 0 ? 0 : byteSize(tensor) / rows;
  std::vector<size_t> bytes(ranks);
  if (splits.empty()) {
    TORCH_CHECK(rows % ranks == 0, "chorus: alltoall_base: the ", which, " tensor's ", rows,
                " rows do not split evenly over ", ranks, " ranks");
    for (auto& b : bytes) b = rows / ranks * rowBytes;
    return bytes;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == ranks, "chorus: alltoall_base: ", splits.size(), " ", which,
              " split sizes for ", ranks, " ranks");
  int64_t total = 0;
  for (int i = 0; i < ranks; ++i) {
    TORCH_CHECK(splits[i] >= 0, "chorus: alltoall_base: negative ", which, " split size ", splits[i]);
    total += splits[i];
    bytes[i] = splits[i] * rowBytes;
  }
  TORCH_CHECK(total == rows, "chorus: alltoall_base: ", which, " split sizes add up to ", total, ", the tensor has ",
              rows, " rows");
  return bytes;
}

}  // namespace

// ---- reductions ----

std::vector<ChorusBackend::Call> ChorusBackend::reductionCalls(const char* op, const at::Tensor& tensor,
                                                               const c10d::ReduceOp& reduceOp, int root) {
  checkTensor(tensor, op);
  const Reduction r = reductionOf(tensor, reduceOp, op);
  const Staged staged = stage(tensor, Staged::Use::ReadWrite);
  if (r.kind == Reduction::Kind::Bitwise) {
    // No NCCL call sees this root (the ranks gather, then the root combines): check it here.
    TORCH_CHECK(root >= -1 && root < size_, "chorus: ", op, ": root ", root, " is out of range for a group of ", size_,
                " ranks");
    const at::Tensor data = staged.buffer;
    at::Tensor gathered = at::empty({size_ * data.numel()}, data.options());
    auto issue = [data, gathered](ncclComm_t comm) {
      return ncclAllGather(dataOf(data), dataOf(gathered), byteSize(data), ncclUint8, comm, nullptr);
    };
    auto after = [staged, gathered, ranks = size_, root, self = rank_, bitwise = r.bitwise] {
      if (root < 0 || root == self) {
        combineBitwise(gathered, ranks, bitwise, staged.buffer);
        staged.copyBack();
      }
    };
    return {Call{issue, after}};
  }
  const at::Tensor data = reducible(staged.buffer);
  // A copy in a wider type is taken when the call is issued, in queue order: an earlier
  // call queued on the same tensor has written it by then.
  auto computed = std::make_shared<at::Tensor>();
  auto [issue, after] = reductionSteps(r, [computed, data, root, r](ncclRedOp_t redOp, ncclComm_t comm) {
    *computed = computeTensor(data, r);
    void* buffer = dataOf(*computed);
    if (root < 0) return ncclAllReduce(buffer, buffer, computed->numel(), r.type, redOp, comm, nullptr);
    return ncclReduce(buffer, buffer, computed->numel(), r.type, redOp, root, comm, nullptr);
  });
  // Only where the result lands: a reduce's other ranks keep their tensors as they were.
  const bool receives = root < 0 || root == rank_;
  auto afterAll = [after = after, staged, r, computed, data, receives, ranks = size_] {
    if (after) after();
    if (!receives) return;
    finishReduction(r, *computed, data, ranks);
    staged.copyBack();
  };
  return {Call{issue, afterAll}};
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  // PyTorch hands sparse CPU tensors to allreduce (backend_sparse.cc).
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse)
    return allreduce_sparse(tensors, opts);
  const at::Tensor& tensor = singleTensor(tensors, "allreduce");
  return collective("allreduce", c10d::OpType::ALLREDUCE, {tensor}, {tensor},
                    reductionCalls("allreduce", tensor, opts.reduceOp, -1), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: allreduce_coalesced: no tensors");
  std::vector<Call> calls;
  for (const at::Tensor& tensor : tensors) {
    for (Call& call : reductionCalls("allreduce_coalesced", tensor, opts.reduceOp, -1))
      calls.push_back(std::move(call));
  }
  return collective("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, tensors, std::move(calls),
                    opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  // The root is passed on unchecked: Chorus validates it and its message reaches wait().
  const at::Tensor& tensor = singleTensor(tensors, "reduce");
  return collective("reduce", c10d::OpType::REDUCE, {tensor}, {tensor},
                    reductionCalls("reduce", tensor, opts.reduceOp, static_cast<int>(opts.rootRank)), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  const Staged staged = stage(singleTensor(tensors, "broadcast"), Staged::Use::ReadWrite);
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor data = staged.buffer;
  Call call{[data, root](ncclComm_t comm) {
              return ncclBroadcast(dataOf(data), dataOf(data), byteSize(data), ncclUint8, root, comm, nullptr);
            },
            [staged] { staged.copyBack(); }};
  return collective("broadcast", c10d::OpType::BROADCAST, {staged.user}, {staged.user}, {call}, opts.timeout);
}

// ---- gathers ----

ChorusBackend::Call ChorusBackend::allgatherCall(const at::Tensor& input, const std::vector<at::Tensor>& blocks) {
  const at::Tensor in = input.contiguous();
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  return Call{[in, flat](ncclComm_t comm) {
                return ncclAllGather(dataOf(in), dataOf(flat), byteSize(in), ncclUint8, comm, nullptr);
              },
              [flat, blocks] { scatterBlocks(flat, blocks); }};
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = singleTensor(inputs, "allgather");
  std::vector<at::Tensor> list = worldList(outputs, input, "allgather");
  return collective("allgather", c10d::OpType::ALLGATHER, {input}, list, {allgatherCall(input, list)}, opts.timeout);
}

namespace {

// The checks of a call one of whose tensors holds world size x the other: all_gather_into_tensor's
// output (`outputWhole`), reduce_scatter_tensor's input.
void checkWorldSized(const at::Tensor& output, const at::Tensor& input, bool outputWhole, int ranks, const char* op) {
  checkTensor(input, op);
  checkTensor(output, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", op, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  const at::Tensor& whole = outputWhole ? output : input;
  const at::Tensor& part = outputWhole ? input : output;
  TORCH_CHECK(whole.numel() == part.numel() * ranks, "chorus: ", op, ": ", outputWhole ? "output" : "input", " has ",
              whole.numel(), " elements, expected world size ", ranks, " x ", part.numel());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  checkWorldSized(output, input, true, size_, "_allgather_base");
  const at::Tensor in = input.contiguous();
  const Staged out = stage(output, Staged::Use::Write);
  Call call{[in, flat = out.buffer](ncclComm_t comm) {
              return ncclAllGather(dataOf(in), dataOf(flat), byteSize(in), ncclUint8, comm, nullptr);
            },
            [out] { out.copyBack(); }};
  return collective("_allgather_base", c10d::OpType::_ALLGATHER_BASE, {input}, {output}, {call}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "chorus: allgather_into_tensor_coalesced: ", inputs.size(), " inputs and ", outputs.size(), " outputs");
  std::vector<Call> calls;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkWorldSized(outputs[i], inputs[i], true, size_, "allgather_into_tensor_coalesced");
    const at::Tensor in = inputs[i].contiguous();
    const Staged out = stage(outputs[i], Staged::Use::Write);
    calls.push_back(Call{[in, flat = out.buffer](ncclComm_t comm) {
                           return ncclAllGather(dataOf(in), dataOf(flat), byteSize(in), ncclUint8, comm, nullptr);
                         },
                         [out] { out.copyBack(); }});
  }
  return collective("allgather_into_tensor_coalesced", c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, inputs, outputs,
                    std::move(calls), opts.timeout);
}

// output_lists[r][i] receives input i of rank r (torch.distributed.all_gather_coalesced).
c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "chorus: ", op, ": no input tensors");
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "chorus: ", op, ": expects world size ", size_,
              " output lists, got ", outputLists.size());
  std::vector<Call> calls;
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], op);
    std::vector<at::Tensor> blocks;
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK(outputLists[r].size() == inputs.size(), "chorus: ", op, ": output list ", r, " has ",
                  outputLists[r].size(), " tensors for ", inputs.size(), " inputs");
      const at::Tensor& block = outputLists[r][i];
      checkTensor(block, op);
      TORCH_CHECK(block.numel() == inputs[i].numel() && block.scalar_type() == inputs[i].scalar_type(), "chorus: ", op,
                  ": output ", r, "/", i, " does not match input ", i, " in dtype and size");
      blocks.push_back(block);
      outputs.push_back(block);
    }
    calls.push_back(allgatherCall(inputs[i], blocks));
  }
  return collective(op, c10d::OpType::ALLGATHER_COALESCED, inputs, outputs, std::move(calls), opts.timeout);
}

std::vector<at::Tensor> ChorusBackend::rootBlocks(const std::vector<std::vector<at::Tensor>>& lists, int root,
                                                  const at::Tensor& sample, const char* op) const {
  if (rank_ != root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "chorus: ", op, ": only the root (rank ",
                root, ") passes a tensor list");
    return {};
  }
  return worldList(lists, sample, op);
}

std::vector<at::Tensor> ChorusBackend::worldList(const std::vector<std::vector<at::Tensor>>& lists,
                                                 const at::Tensor& sample, const char* op) const {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size_, "chorus: ", op,
              ": expects one list of world size ", size_, " tensors");
  for (const at::Tensor& block : lists[0]) {
    checkTensor(block, op);
    TORCH_CHECK(block.numel() == sample.numel() && block.scalar_type() == sample.scalar_type(), "chorus: ", op,
                ": every tensor of the list must match this rank's tensor in dtype and size");
  }
  return lists[0];
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor input = singleTensor(inputs, "gather").contiguous();
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> blocks = rootBlocks(outputs, root, input, "gather");
  at::Tensor flat = blocks.empty() ? at::Tensor() : at::empty({size_ * input.numel()}, input.options());
  Call call{[input, flat, root](ncclComm_t comm) {
              return ncclGather(dataOf(input), flat.defined() ? dataOf(flat) : nullptr, byteSize(input), ncclUint8,
                                root, comm, nullptr);
            },
            [blocks, flat] {
              if (!blocks.empty()) scatterBlocks(flat, blocks);
            }};
  return collective("gather", c10d::OpType::GATHER, {input}, blocks, {call}, opts.timeout);
}

// dist.gather_single (gather_into_tensor): the root's one contiguous output holds world size
// x the input, rank-major; the others pass an empty placeholder, which is not looked at.
c10::intrusive_ptr<c10d::Work> ChorusBackend::gather_single(at::Tensor& output, at::Tensor& input,
                                                            const c10d::GatherOptions& opts) {
  const char* op = "gather_single";
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "chorus: ", op, ": root ", root, " is out of range for a group of ", size_,
              " ranks");
  checkTensor(input, op);
  const at::Tensor in = input.contiguous();
  std::vector<at::Tensor> outputs;
  if (rank_ == root) {
    checkWorldSized(output, input, true, size_, op);
    TORCH_CHECK(output.is_contiguous(), "chorus: ", op, ": the output tensor must be contiguous (sizes ",
                output.sizes(), ", strides ", output.strides(), ")");
    outputs.push_back(output);
  }
  Call call{[in, outputs, root](ncclComm_t comm) {
              return ncclGather(dataOf(in), outputs.empty() ? nullptr : dataOf(outputs[0]), byteSize(in), ncclUint8,
                                root, comm, nullptr);
            },
            {}};
  return collective(op, c10d::OpType::GATHER, {input}, outputs, {call}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const Staged out = stage(singleTensor(outputs, "scatter"), Staged::Use::Write);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> blocks = rootBlocks(inputs, root, out.user, "scatter");
  at::Tensor flat = blocks.empty() ? at::Tensor() : concatenated(blocks);
  Call call{[flat, buffer = out.buffer, root](ncclComm_t comm) {
              return ncclScatter(flat.defined() ? dataOf(flat) : nullptr, dataOf(buffer), byteSize(buffer), ncclUint8,
                                 root, comm, nullptr);
            },
            [out] { out.copyBack(); }};
  return collective("scatter", c10d::OpType::SCATTER, blocks, {out.user}, {call}, opts.timeout);
}

// ---- reduce_scatter ----

std::vector<ChorusBackend::Call> ChorusBackend::reduceScatterCalls(const char* op, const at::Tensor& output,
                                                                   const at::Tensor& input,
                                                                   const c10d::ReduceOp& reduceOp) {
  const Reduction r = reductionOf(output, reduceOp, op);
  const Staged staged = stage(output, Staged::Use::Write);
  if (r.kind == Reduction::Kind::Bitwise) {
    // NCCL has no bitwise ops: every rank's block for this rank comes over an all-to-all,
    // and this rank combines them.
    const at::Tensor whole = input.contiguous();
    const at::Tensor blocks = at::empty({size_ * staged.buffer.numel()}, staged.buffer.options());
    auto issue = [whole, blocks, perPeer = byteSize(staged.buffer)](ncclComm_t comm) {
      return ncclAlltoAll(dataOf(whole), dataOf(blocks), perPeer, ncclUint8, comm, nullptr);
    };
    auto combine = [blocks, staged, ranks = size_, bitwise = r.bitwise] {
      combineBitwise(blocks, ranks, bitwise, staged.buffer);
      staged.copyBack();
    };
    return {Call{issue, combine}};
  }
  const at::Tensor in = reducible(input.contiguous());
  const at::Tensor out = reducible(staged.buffer);
  const at::Tensor computed = out.scalar_type() == r.computeType ? out : at::empty_like(out, r.computeType);
  // The input in a wider type is taken when issued (as reductionCalls' copy) and kept until
  // the call completed (the communicator is non-blocking).
  auto wide = std::make_shared<at::Tensor>();
  auto [issue, after] = reductionSteps(r, [in, wide, computed, r](ncclRedOp_t redOp, ncclComm_t comm) {
    *wide = computeTensor(in, r);
    return ncclReduceScatter(dataOf(*wide), dataOf(computed), computed.numel(), r.type, redOp, comm, nullptr);
  });
  auto afterAll = [after = after, staged, r, wide, computed, out, ranks = size_] {  // wide: kept to here
    if (after) after();
    finishReduction(r, computed, out, ranks);
    staged.copyBack();
  };
  return {Call{issue, afterAll}};
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  checkWorldSized(output, input, false, size_, "_reduce_scatter_base");
  return collective("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, {input}, {output},
                    reduceScatterCalls("_reduce_scatter_base", output, input, opts.reduceOp), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "chorus: ", op, ": ", inputs.size(), " inputs and ",
              outputs.size(), " outputs");
  std::vector<Call> calls;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkWorldSized(outputs[i], inputs[i], false, size_, op);
    for (Call& call : reduceScatterCalls(op, outputs[i], inputs[i], opts.reduceOp)) calls.push_back(std::move(call));
  }
  return collective(op, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, outputs, std::move(calls), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = singleTensor(outputs, "reduce_scatter");
  std::vector<at::Tensor> list = worldList(inputs, output, "reduce_scatter");
  return collective("reduce_scatter", c10d::OpType::REDUCE_SCATTER, list, {output},
                    reduceScatterCalls("reduce_scatter", output, concatenated(list), opts.reduceOp), opts.timeout);
}

// ---- all-to-all ----

c10::intrusive_ptr<c10d::Work> ChorusBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& outputSplitSizes,
                                                            std::vector<int64_t>& inputSplitSizes,
                                                            const c10d::AllToAllOptions& opts) {
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: alltoall_base: dtypes differ");
  const std::vector<size_t> sendBytes = blockBytes(input, inputSplitSizes, size_, "input");
  const std::vector<size_t> recvBytes = blockBytes(output, outputSplitSizes, size_, "output");
  const at::Tensor in = input.contiguous();
  const Staged out = stage(output, Staged::Use::Write);
  std::vector<Transfer> transfers;
  size_t sendAt = 0;
  size_t recvAt = 0;
  for (int peer = 0; peer < size_; ++peer) {
    transfers.push_back({peer, static_cast<char*>(dataOf(in)) + sendAt, sendBytes[peer], true});
    transfers.push_back({peer, static_cast<char*>(dataOf(out.buffer)) + recvAt, recvBytes[peer], false});
    sendAt += sendBytes[peer];
    recvAt += recvBytes[peer];
  }
  Call call{[transfers, in, buffer = out.buffer](ncclComm_t comm) { return exchange(transfers, comm); },
            [out] { out.copyBack(); }};
  return collective("alltoall_base", c10d::OpType::ALLTOALL_BASE, {input}, {output}, {call}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "chorus: alltoall: expects world size ", size_, " inputs and outputs, got ", inputs.size(), " and ",
              outputs.size());
  std::vector<Transfer> transfers;
  std::vector<at::Tensor> ins;
  std::vector<Staged> outs;
  for (int peer = 0; peer < size_; ++peer) {
    checkTensor(inputs[peer], "alltoall");
    checkTensor(outputs[peer], "alltoall");
    ins.push_back(inputs[peer].contiguous());
    outs.push_back(stage(outputs[peer], Staged::Use::Write));
    transfers.push_back({peer, dataOf(ins.back()), byteSize(ins.back()), true});
    transfers.push_back({peer, dataOf(outs.back().buffer), byteSize(outs.back().buffer), false});
  }
  Call call{[transfers, ins, outs](ncclComm_t comm) { return exchange(transfers, comm); },
            [outs] {
              for (const Staged& out : outs) out.copyBack();
            }};
  return collective("alltoall", c10d::OpType::ALLTOALL, inputs, outputs, {call}, opts.timeout);
}

}  // namespace chorus_torch
