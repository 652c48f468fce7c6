#include "process_group_chorus.h"

#include <cstring>

#include "chorus_work.h"
#include "tensor_types.h"

namespace chorus_torch {

namespace {

constexpr const char* kUniqueIdKey = "chorus/unique_id";

// Rank 0 makes the unique id and puts it in the group's store; the others wait for it
// there (bounded by the store's own timeout). Then every rank joins, non-blocking.
ncclComm_t joinCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                            std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    TORCH_CHECK(made == ncclSuccess, "chorus: ncclGetUniqueId failed: ", describeResult(made));
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set(kUniqueIdKey, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(bytes.size() == sizeof(id), "chorus: the store's unique id has ", bytes.size(), " bytes, expected ",
                sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  TORCH_CHECK(result == ncclSuccess || result == ncclInProgress, "chorus: ncclCommInitRankConfig (rank ", rank, " of ",
              size, ") failed: ", describeResult(result));
  result = CollectiveQueue::awaitComm(comm, Clock::now() + timeout);
  if (result != ncclSuccess) {
    const std::string why = result == ncclInProgress ? std::string("timed out") : describeResult(result);
    ncclCommAbort(comm);
    TORCH_CHECK(false, "chorus: joining the communicator (rank ", rank, " of ", size, ") failed: ", why);
  }
  return comm;
}

void* dataOf(const at::Tensor& tensor) { return tensor.data_ptr(); }

// The blocks one after another: one copy, on the caller's thread, gives the contiguous
// buffer NCCL reads from.
at::Tensor concatenated(const std::vector<at::Tensor>& blocks) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& block : blocks) flat.push_back(block.view(-1));
  return at::cat(flat);
}

// A PreMulSum op lives from its collective's issue until the collective is done; after a
// failure the communicator is aborted, which frees it with everything else.
struct PreMulSumOp {
  ncclComm_t comm = nullptr;
  ncclRedOp_t op{};
  bool live = false;
};

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      queue_(std::make_unique<CollectiveQueue>(joinCommunicator(store, rank, size, timeout), timeout)) {}

// The queue's thread may need the GIL to drop its last reference to a tensor that
// Python made, so a destructor called from Python lets go of the GIL while it joins.
ProcessGroupChorus::~ProcessGroupChorus() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release noGil;
    queue_.reset();
  } else {
    queue_.reset();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::enqueue(const char* op, c10d::OpType type,
                                                           std::vector<at::Tensor> outputs, Issue issue,
                                                           std::function<void()> after) {
  auto work = c10::make_intrusive<ChorusWork>(rank_, type, std::move(outputs));
  queue_->push(op, std::move(issue), [work, after = std::move(after)](ncclResult_t result, const std::string& why) {
    if (result == ncclSuccess && after) {
      try {
        after();
      } catch (const std::exception& e) {
        return work->complete(ncclInternalError, std::string("after the collective: ") + e.what());
      }
    }
    work->complete(result, why);
  });
  return work;
}

namespace {

// The issue step of a reduction and what must follow it once it is done.
std::pair<CollectiveQueue::Issue, std::function<void()>> reductionSteps(
    const Reduction& r, std::function<ncclResult_t(ncclRedOp_t, ncclComm_t)> call) {
  if (r.kind != Reduction::Kind::PreMulSum) {
    return {[call, op = r.op](ncclComm_t comm) { return call(op, comm); }, {}};
  }
  auto premul = std::make_shared<PreMulSumOp>();
  auto issue = [premul, call, r](ncclComm_t comm) {
    at::Tensor factor = at::scalar_tensor(r.factor, at::TensorOptions().dtype(r.scalarType));
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

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduceInPlace(const char* op, c10d::OpType type,
                                                                 const at::Tensor& tensor,
                                                                 const c10d::ReduceOp& reduceOp, int root) {
  const Reduction r = reductionOf(tensor, reduceOp, op);
  if (r.kind == Reduction::Kind::Bitwise) {
    // No NCCL call sees this root (the ranks gather, then the root combines): check it here.
    TORCH_CHECK(root >= -1 && root < size_, "chorus: ", op, ": root ", root, " is out of range for a group of ", size_,
                " ranks");
    at::Tensor gathered = at::empty({size_ * tensor.numel()}, tensor.options());
    const int self = rank_;
    const int ranks = size_;
    auto issue = [tensor, gathered](ncclComm_t comm) {
      return ncclAllGather(dataOf(tensor), dataOf(gathered), byteSize(tensor), ncclUint8, comm, nullptr);
    };
    auto after = [tensor, gathered, ranks, root, self, bitwise = r.bitwise] {
      if (root < 0 || root == self) combineBitwise(gathered, ranks, bitwise, tensor);
    };
    return enqueue(op, type, {tensor}, issue, after);
  }
  at::Tensor data = reducible(tensor);
  auto [issue, after] = reductionSteps(r, [data, root, r](ncclRedOp_t redOp, ncclComm_t comm) {
    if (root < 0) return ncclAllReduce(dataOf(data), dataOf(data), data.numel(), r.type, redOp, comm, nullptr);
    return ncclReduce(dataOf(data), dataOf(data), data.numel(), r.type, redOp, root, comm, nullptr);
  });
  return enqueue(op, type, {tensor}, issue, after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  return reduceInPlace("allreduce", c10d::OpType::ALLREDUCE, singleTensor(tensors, "allreduce"), opts.reduceOp, -1);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  // The root is passed on unchecked: Chorus validates it and its message reaches wait().
  return reduceInPlace("reduce", c10d::OpType::REDUCE, singleTensor(tensors, "reduce"), opts.reduceOp,
                       static_cast<int>(opts.rootRank));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  at::Tensor tensor = singleTensor(tensors, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue("broadcast", c10d::OpType::BROADCAST, {tensor}, [tensor, root](ncclComm_t comm) {
    return ncclBroadcast(dataOf(tensor), dataOf(tensor), byteSize(tensor), ncclUint8, root, comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  checkTensor(input, "_allgather_base");
  checkTensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _allgather_base: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "chorus: _allgather_base: output has ", output.numel(),
              " elements, expected world size ", size_, " x ", input.numel());
  return enqueue("_allgather_base", c10d::OpType::_ALLGATHER_BASE, {output}, [output, input](ncclComm_t comm) {
    return ncclAllGather(dataOf(input), dataOf(output), byteSize(input), ncclUint8, comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions&) {
  at::Tensor input = singleTensor(inputs, "allgather");
  std::vector<at::Tensor> list = worldList(outputs, input, "allgather");
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  auto issue = [input, flat](ncclComm_t comm) {
    return ncclAllGather(dataOf(input), dataOf(flat), byteSize(input), ncclUint8, comm, nullptr);
  };
  auto after = [list, flat, ranks = size_] {
    at::Tensor blocks = flat.view({ranks, -1});
    for (int i = 0; i < ranks; ++i) list[i].view(-1).copy_(blocks[i]);
  };
  return enqueue("allgather", c10d::OpType::ALLGATHER, list, issue, after);
}

std::vector<at::Tensor> ProcessGroupChorus::rootBlocks(const std::vector<std::vector<at::Tensor>>& lists, int root,
                                                       const at::Tensor& sample, const char* op) const {
  if (rank_ != root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "chorus: ", op, ": only the root (rank ",
                root, ") passes a tensor list");
    return {};
  }
  return worldList(lists, sample, op);
}

std::vector<at::Tensor> ProcessGroupChorus::worldList(const std::vector<std::vector<at::Tensor>>& lists,
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

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  at::Tensor input = singleTensor(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> blocks = rootBlocks(outputs, root, input, "gather");
  at::Tensor flat = blocks.empty() ? at::Tensor() : at::empty({size_ * input.numel()}, input.options());
  auto issue = [input, flat, root](ncclComm_t comm) {
    return ncclGather(dataOf(input), flat.defined() ? dataOf(flat) : nullptr, byteSize(input), ncclUint8, root, comm,
                      nullptr);
  };
  auto after = [blocks, flat] {
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i].view(-1).copy_(flat.view({int64_t(blocks.size()), -1})[i]);
  };
  return enqueue("gather", c10d::OpType::GATHER, blocks, issue, after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  at::Tensor output = singleTensor(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> blocks = rootBlocks(inputs, root, output, "scatter");
  at::Tensor flat = blocks.empty() ? at::Tensor() : concatenated(blocks);
  return enqueue("scatter", c10d::OpType::SCATTER, {output}, [output, flat, root](ncclComm_t comm) {
    return ncclScatter(flat.defined() ? dataOf(flat) : nullptr, dataOf(output), byteSize(output), ncclUint8, root, comm,
                       nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduceScatterFlat(const char* op, c10d::OpType type,
                                                                     at::Tensor output, at::Tensor input,
                                                                     const c10d::ReduceOp& reduceOp) {
  const Reduction r = reductionOf(output, reduceOp, op);
  TORCH_CHECK(r.kind != Reduction::Kind::Bitwise, "chorus: ", op,
              ": bitwise ops are supported by allreduce and reduce only");
  at::Tensor in = reducible(input);
  at::Tensor out = reducible(output);
  auto [issue, after] = reductionSteps(r, [in, out, r](ncclRedOp_t redOp, ncclComm_t comm) {
    return ncclReduceScatter(dataOf(in), dataOf(out), out.numel(), r.type, redOp, comm, nullptr);
  });
  return enqueue(op, type, {output}, issue, after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base");
  checkTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _reduce_scatter_base: dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * size_, "chorus: _reduce_scatter_base: input has ", input.numel(),
              " elements, expected world size ", size_, " x ", output.numel());
  return reduceScatterFlat("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, output, input, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  at::Tensor output = singleTensor(outputs, "reduce_scatter");
  std::vector<at::Tensor> list = worldList(inputs, output, "reduce_scatter");
  return reduceScatterFlat("reduce_scatter", c10d::OpType::REDUCE_SCATTER, output, concatenated(list), opts.reduceOp);
}

namespace {

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

// Byte offsets of `splits` rows of `rowBytes` each; equal rows per rank when `splits` is empty.
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

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& outputSplitSizes,
                                                                 std::vector<int64_t>& inputSplitSizes,
                                                                 const c10d::AllToAllOptions&) {
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: alltoall_base: dtypes differ");
  const std::vector<size_t> sendBytes = blockBytes(input, inputSplitSizes, size_, "input");
  const std::vector<size_t> recvBytes = blockBytes(output, outputSplitSizes, size_, "output");
  std::vector<Transfer> transfers;
  size_t sendAt = 0;
  size_t recvAt = 0;
  for (int peer = 0; peer < size_; ++peer) {
    transfers.push_back({peer, static_cast<char*>(dataOf(input)) + sendAt, sendBytes[peer], true});
    transfers.push_back({peer, static_cast<char*>(dataOf(output)) + recvAt, recvBytes[peer], false});
    sendAt += sendBytes[peer];
    recvAt += recvBytes[peer];
  }
  return enqueue("alltoall_base", c10d::OpType::ALLTOALL_BASE, {output},
                 [transfers, input, output](ncclComm_t comm) { return exchange(transfers, comm); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "chorus: alltoall: expects world size ", size_, " inputs and outputs, got ", inputs.size(), " and ",
              outputs.size());
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    checkTensor(inputs[peer], "alltoall");
    checkTensor(outputs[peer], "alltoall");
    transfers.push_back({peer, dataOf(inputs[peer]), byteSize(inputs[peer]), true});
    transfers.push_back({peer, dataOf(outputs[peer]), byteSize(outputs[peer]), false});
  }
  return enqueue("alltoall", c10d::OpType::ALLTOALL, outputs,
                 [transfers, inputs](ncclComm_t comm) { return exchange(transfers, comm); });
}

// Tags are ignored, as in PyTorch's NCCL backend: messages between two ranks match in order.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  at::Tensor tensor = singleTensor(tensors, "send");
  return enqueue("send", c10d::OpType::SEND, {}, [tensor, dstRank](ncclComm_t comm) {
    return ncclSend(dataOf(tensor), byteSize(tensor), ncclUint8, dstRank, comm, nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  at::Tensor tensor = singleTensor(tensors, "recv");
  return enqueue("recv", c10d::OpType::RECV, {tensor}, [tensor, srcRank](ncclComm_t comm) {
    return ncclRecv(dataOf(tensor), byteSize(tensor), ncclUint8, srcRank, comm, nullptr);
  });
}

// An AllReduce of one element: every rank's earlier work is done once it completes.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions&) {
  at::Tensor token = at::zeros({1}, at::kFloat);
  return enqueue("barrier", c10d::OpType::BARRIER, {}, [token](ncclComm_t comm) {
    return ncclAllReduce(dataOf(token), dataOf(token), 1, ncclFloat32, ncclSum, comm, nullptr);
  });
}

}  // namespace chorus_torch
