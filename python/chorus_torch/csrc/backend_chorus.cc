#include "backend_chorus.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <sstream>

#include "chorus.h"
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
  ncclResult_t result = chorusCommInitRankExecutor(&comm, size, id, rank, &config, chorusExecutorCpu);
  TORCH_CHECK(result == ncclSuccess || result == ncclInProgress, "chorus: chorusCommInitRankExecutor (rank ", rank,
              " of ", size, ") failed: ", describeResult(result));
  result = CollectiveQueue::awaitComm(comm, Clock::now() + timeout);
  if (result != ncclSuccess) {
    const std::string why = result == ncclInProgress ? std::string("timed out") : describeResult(result);
    ncclCommAbort(comm);
    TORCH_CHECK(false, "chorus: joining the communicator (rank ", rank, " of ", size, ") failed: ", why);
  }
  return comm;
}

// A store of its own for the backend's threads (a TCPStore client is one connection).
c10::intrusive_ptr<c10d::Store> ownStore(const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    return store->clone();
  } catch (const std::exception&) {
    return store;
  }
}

void* dataOf(const at::Tensor& tensor) { return tensor.data_ptr(); }

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

std::chrono::milliseconds timeoutOf(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? timeout : std::chrono::milliseconds(0);
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

// Runs the calls of a job: one alone, several as one NCCL group (which an error inside
// still closes).
ncclResult_t issueAll(const std::vector<CollectiveQueue::Issue>& issues, ncclComm_t comm) {
  if (issues.size() == 1) return issues[0](comm);
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  for (const auto& issue : issues) {
    if (result != ncclSuccess && result != ncclInProgress) break;
    result = issue(comm);
  }
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess && result != ncclInProgress ? result : end;
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

// Lets go of the GIL while `fn` joins the queues' threads: a queue's thread may need it
// to drop its last reference to a tensor that Python made.
template <typename Fn>
void withoutGil(Fn fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release noGil;
    fn();
  } else {
    fn();
  }
}

}  // namespace

ChorusBackend::ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             c10::intrusive_ptr<Options> options, std::string name)
    : c10d::Backend(rank, size), options_(std::move(options)), name_(std::move(name)), store_(store) {
  queue_ = std::make_unique<CollectiveQueue>(joinCommunicator(store, rank, size, options_->timeout), options_->timeout);
  peers_ = std::make_unique<PeerChannels>(ownStore(store), rank, options_->timeout);
  init();
}

ChorusBackend::ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, ncclComm_t comm, int rank, int size,
                             c10::intrusive_ptr<Options> options, std::string name)
    : c10d::Backend(rank, size), options_(std::move(options)), name_(std::move(name)), store_(store) {
  queue_ = std::make_unique<CollectiveQueue>(comm, options_->timeout);
  peers_ = std::make_unique<PeerChannels>(ownStore(store), rank, options_->timeout);
  init();
}

ChorusBackend::~ChorusBackend() { close(); }

c10::intrusive_ptr<c10d::Backend> ChorusBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                       const std::vector<int>& ranks,
                                                       const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  checkOpen("split");
  TORCH_CHECK(!ranks.empty(), "chorus: split: no ranks");
  for (int r : ranks) TORCH_CHECK(r >= 0 && r < size_, "chorus: split: rank ", r, " is not in a group of ", size_);
  const auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = mine != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : NCCL_SPLIT_NOCOLOR;
  const int key = member ? static_cast<int>(mine - ranks.begin()) : 0;
  auto options = c10::dynamic_intrusive_pointer_cast<Options>(opts);
  if (!options) {  // another backend's options: keep what they say that applies here
    options = c10::make_intrusive<Options>(opts ? opts->timeout : options_->timeout);
    if (opts) {
      options->group_name = opts->group_name;
      options->group_desc = opts->group_desc;
      options->global_ranks_in_group = opts->global_ranks_in_group;
    }
  }
  // Issued on this group's queue, so it is ordered with the collectives queued before it;
  // the job ends when the parent has settled, which includes the child's set-up.
  auto child = std::make_shared<ncclComm_t>(nullptr);
  auto done = std::make_shared<std::promise<std::string>>();
  std::future<std::string> outcome = done->get_future();
  queue_->push(
      "split",
      [child, color, key](ncclComm_t parent) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        return ncclCommSplit(parent, color, key, child.get(), &config);
      },
      [done](ncclResult_t result, const std::string& message) {
        done->set_value(result == ncclSuccess ? std::string() : message);
      },
      options->timeout);
  std::string failure;
  withoutGil([&] { failure = outcome.get(); });
  if (failure.empty() && *child != nullptr) {
    const ncclResult_t ready = CollectiveQueue::awaitComm(*child, Clock::now() + options->timeout);
    if (ready != ncclSuccess) {
      ncclCommAbort(*child);
      failure = "the new communicator did not get ready: " +
                (ready == ncclInProgress ? std::string("timed out") : describeResult(ready));
    }
  }
  TORCH_CHECK(failure.empty(), "chorus: split: ", failure);
  if (!member) return nullptr;
  TORCH_CHECK(*child != nullptr, "chorus: split: ncclCommSplit gave rank ", rank_, " no communicator");
  return c10::make_intrusive<ChorusBackend>(store, *child, key, static_cast<int>(ranks.size()), options, name_);
}

void ChorusBackend::close() {
  if (closed_.exchange(true)) return;
  withoutGil([this] {
    peers_.reset();
    queue_.reset();
  });
}

void ChorusBackend::shutdown() { close(); }

void ChorusBackend::abort() {
  if (closed_.load()) return;
  const std::string why = "the group was aborted (Backend.abort)";
  queue_->abort(why);
  peers_->abort(why);
}

void ChorusBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  if (closed_.load()) return;
  queue_->setTimeout(timeout);
  peers_->setTimeout(timeout);
}

void ChorusBackend::checkOpen(const char* op) const {
  TORCH_CHECK(!closed_.load(), "chorus: ", op, ": the process group was shut down");
}

std::vector<JobTiming> ChorusBackend::timings() const {
  if (closed_.load()) return {};
  std::vector<JobTiming> all = queue_->timings();
  std::vector<JobTiming> p2p = peers_->timings();
  all.insert(all.end(), p2p.begin(), p2p.end());
  std::stable_sort(all.begin(), all.end(), [](const JobTiming& a, const JobTiming& b) { return a.queued < b.queued; });
  return all;
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::collective(const char* op, c10d::OpType type,
                                                         const std::vector<at::Tensor>& inputs,
                                                         std::vector<at::Tensor> outputs, std::vector<Call> calls,
                                                         std::chrono::milliseconds timeout) {
  checkOpen(op);
  const uint64_t sequence = ++sequence_;
  auto work = c10::make_intrusive<ChorusWork>(rank_, type, sequence, outputs, 1, profilingTitle(name_, type), inputs);
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (coalescing_) {
      for (Call& call : calls) coalescing_->calls.push_back(std::move(call));
      coalescing_->works.push_back(work);
      coalescing_->outputs.insert(coalescing_->outputs.end(), outputs.begin(), outputs.end());
      coalescing_->timeout = std::max(coalescing_->timeout, timeout);
      return work;
    }
  }
  std::vector<CollectiveQueue::Issue> issues;
  std::vector<std::function<void()>> afters;
  for (Call& call : calls) {
    issues.push_back(std::move(call.issue));
    if (call.after) afters.push_back(std::move(call.after));
  }
  queue_->push(
      op, [issues = std::move(issues)](ncclComm_t comm) { return issueAll(issues, comm); },
      [work, afters = std::move(afters)](ncclResult_t result, const std::string& why) {
        if (result == ncclSuccess) {
          try {
            at::NoGradGuard noGrad;
            for (const auto& after : afters) after();
          } catch (const std::exception& e) {
            return work->complete(ncclInternalError, std::string("after the collective: ") + e.what());
          }
        }
        work->complete(result, why);
      },
      timeout);
  return work;
}

void ChorusBackend::startCoalescing() {
  checkOpen("startCoalescing");
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  TORCH_CHECK(!coalescing_, "chorus: startCoalescing: the group is coalescing already (endCoalescing first)");
  coalescing_ = std::make_unique<Coalesced>();
  // One part until endCoalescing: the work cannot complete before the block ends.
  coalescing_->all =
      c10::make_intrusive<ChorusWork>(rank_, c10d::OpType::COALESCED, sequence_.load(), std::vector<at::Tensor>{}, 1);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::endCoalescing() {
  checkOpen("endCoalescing");
  std::unique_ptr<Coalesced> block;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    TORCH_CHECK(coalescing_, "chorus: endCoalescing without startCoalescing");
    block = std::move(coalescing_);
  }
  auto all = block->all;
  if (!block->calls.empty()) {
    all->addPart(block->outputs);  // the job of the block's collectives
    block->works.push_back(all);
    std::vector<CollectiveQueue::Issue> issues;
    std::vector<std::function<void()>> afters;
    for (Call& call : block->calls) {
      issues.push_back(std::move(call.issue));
      if (call.after) afters.push_back(std::move(call.after));
    }
    queue_->push(
        "coalesced", [issues = std::move(issues)](ncclComm_t comm) { return issueAll(issues, comm); },
        [works = std::move(block->works), afters = std::move(afters)](ncclResult_t result, const std::string& why) {
          std::string failure = why;
          if (result == ncclSuccess) {
            try {
              at::NoGradGuard noGrad;
              for (const auto& after : afters) after();
            } catch (const std::exception& e) {
              result = ncclInternalError;
              failure = std::string("after the coalesced collectives: ") + e.what();
            }
          }
          for (const auto& work : works) work->complete(result, failure);
        },
        block->timeout);
  }
  all->complete(ncclSuccess, "");  // the part held since startCoalescing
  return all;
}

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
  auto [issue, after] = reductionSteps(r, [data, root, r](ncclRedOp_t redOp, ncclComm_t comm) {
    if (root < 0) return ncclAllReduce(dataOf(data), dataOf(data), data.numel(), r.type, redOp, comm, nullptr);
    return ncclReduce(dataOf(data), dataOf(data), data.numel(), r.type, redOp, root, comm, nullptr);
  });
  auto afterAll = [after = after, staged] {
    if (after) after();
    staged.copyBack();
  };
  return {Call{issue, afterAll}};
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = singleTensor(tensors, "allreduce");
  return collective("allreduce", c10d::OpType::ALLREDUCE, {tensor}, {tensor},
                    reductionCalls("allreduce", tensor, opts.reduceOp, -1), timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce_sparse(std::vector<at::Tensor>&,
                                                               const c10d::AllreduceOptions&) {
  TORCH_CHECK(false,
              "chorus: allreduce_sparse: sparse tensors are not supported; NCCL moves dense buffers: pass "
              "tensor.to_dense(), or use gloo for sparse all_reduce");
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
                    timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  // The root is passed on unchecked: Chorus validates it and its message reaches wait().
  const at::Tensor& tensor = singleTensor(tensors, "reduce");
  return collective("reduce", c10d::OpType::REDUCE, {tensor}, {tensor},
                    reductionCalls("reduce", tensor, opts.reduceOp, static_cast<int>(opts.rootRank)),
                    timeoutOf(opts.timeout));
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
  return collective("broadcast", c10d::OpType::BROADCAST, {staged.user}, {staged.user}, {call},
                    timeoutOf(opts.timeout));
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
  return collective("allgather", c10d::OpType::ALLGATHER, {input}, list, {allgatherCall(input, list)},
                    timeoutOf(opts.timeout));
}

namespace {

// all_gather_into_tensor's checks and call: `output` holds world size x `input`.
void checkGatherInto(const at::Tensor& output, const at::Tensor& input, int ranks, const char* op) {
  checkTensor(input, op);
  checkTensor(output, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", op, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * ranks, "chorus: ", op, ": output has ", output.numel(),
              " elements, expected world size ", ranks, " x ", input.numel());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  checkGatherInto(output, input, size_, "_allgather_base");
  const at::Tensor in = input.contiguous();
  const Staged out = stage(output, Staged::Use::Write);
  Call call{[in, flat = out.buffer](ncclComm_t comm) {
              return ncclAllGather(dataOf(in), dataOf(flat), byteSize(in), ncclUint8, comm, nullptr);
            },
            [out] { out.copyBack(); }};
  return collective("_allgather_base", c10d::OpType::_ALLGATHER_BASE, {input}, {output}, {call},
                    timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "chorus: allgather_into_tensor_coalesced: ", inputs.size(), " inputs and ", outputs.size(), " outputs");
  std::vector<Call> calls;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkGatherInto(outputs[i], inputs[i], size_, "allgather_into_tensor_coalesced");
    const at::Tensor in = inputs[i].contiguous();
    const Staged out = stage(outputs[i], Staged::Use::Write);
    calls.push_back(Call{[in, flat = out.buffer](ncclComm_t comm) {
                           return ncclAllGather(dataOf(in), dataOf(flat), byteSize(in), ncclUint8, comm, nullptr);
                         },
                         [out] { out.copyBack(); }});
  }
  return collective("allgather_into_tensor_coalesced", c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, inputs, outputs,
                    std::move(calls), timeoutOf(opts.timeout));
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
  return collective(op, c10d::OpType::ALLGATHER_COALESCED, inputs, outputs, std::move(calls), timeoutOf(opts.timeout));
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
  return collective("gather", c10d::OpType::GATHER, {input}, blocks, {call}, timeoutOf(opts.timeout));
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
  return collective("scatter", c10d::OpType::SCATTER, blocks, {out.user}, {call}, timeoutOf(opts.timeout));
}

// ---- reduce_scatter ----

std::vector<ChorusBackend::Call> ChorusBackend::reduceScatterCalls(const char* op, const at::Tensor& output,
                                                                   const at::Tensor& input,
                                                                   const c10d::ReduceOp& reduceOp) {
  const Reduction r = reductionOf(output, reduceOp, op);
  TORCH_CHECK(r.kind != Reduction::Kind::Bitwise, "chorus: ", op,
              ": bitwise ops are supported by allreduce and reduce only");
  const at::Tensor in = reducible(input.contiguous());
  const Staged staged = stage(output, Staged::Use::Write);
  const at::Tensor out = reducible(staged.buffer);
  auto [issue, after] = reductionSteps(r, [in, out, r](ncclRedOp_t redOp, ncclComm_t comm) {
    return ncclReduceScatter(dataOf(in), dataOf(out), out.numel(), r.type, redOp, comm, nullptr);
  });
  auto afterAll = [after = after, staged] {
    if (after) after();
    staged.copyBack();
  };
  return {Call{issue, afterAll}};
}

namespace {

void checkScatterFrom(const at::Tensor& output, const at::Tensor& input, int ranks, const char* op) {
  checkTensor(input, op);
  checkTensor(output, op);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: ", op, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * ranks, "chorus: ", op, ": input has ", input.numel(),
              " elements, expected world size ", ranks, " x ", output.numel());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  checkScatterFrom(output, input, size_, "_reduce_scatter_base");
  return collective("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, {input}, {output},
                    reduceScatterCalls("_reduce_scatter_base", output, input, opts.reduceOp), timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                              std::vector<at::Tensor>& inputs,
                                                                              const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), "chorus: ", op, ": ", inputs.size(), " inputs and ",
              outputs.size(), " outputs");
  std::vector<Call> calls;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkScatterFrom(outputs[i], inputs[i], size_, op);
    for (Call& call : reduceScatterCalls(op, outputs[i], inputs[i], opts.reduceOp)) calls.push_back(std::move(call));
  }
  return collective(op, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, outputs, std::move(calls),
                    timeoutOf(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = singleTensor(outputs, "reduce_scatter");
  std::vector<at::Tensor> list = worldList(inputs, output, "reduce_scatter");
  return collective("reduce_scatter", c10d::OpType::REDUCE_SCATTER, list, {output},
                    reduceScatterCalls("reduce_scatter", output, concatenated(list), opts.reduceOp),
                    timeoutOf(opts.timeout));
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
  return collective("alltoall_base", c10d::OpType::ALLTOALL_BASE, {input}, {output}, {call}, timeoutOf(opts.timeout));
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
  return collective("alltoall", c10d::OpType::ALLTOALL, inputs, outputs, {call}, timeoutOf(opts.timeout));
}

// ---- barriers ----

// An AllReduce of one element: every rank's earlier collectives are done once it completes.
c10::intrusive_ptr<c10d::Work> ChorusBackend::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor token = at::zeros({1}, at::kFloat);
  Call call{[token](ncclComm_t comm) {
              return ncclAllReduce(dataOf(token), dataOf(token), 1, ncclFloat32, ncclSum, comm, nullptr);
            },
            {}};
  return collective("barrier", c10d::OpType::BARRIER, {}, {}, {call}, timeoutOf(opts.timeout));
}

// Through the store, as gloo's does through send/recv: every other rank reports its
// arrival, rank 0 waits for each (bounded by the timeout) and then releases them, or names
// the ranks that did not arrive (the first, or all of them with waitAllRanks) and tells
// the others that the barrier failed.
void ChorusBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  checkOpen("monitored_barrier");
  const auto timeout = opts.timeout.count() >= 0 ? opts.timeout : options_->timeout;
  const auto started = Clock::now();
  const std::string prefix = "chorus/monitored_barrier/" + std::to_string(monitoredBarriers_++) + "/";
  auto arrived = [&](int r) { return prefix + "arrived/" + std::to_string(r); };
  const std::string released = prefix + "released";
  const std::string failed = prefix + "failed";
  if (size_ == 1) return;
  if (rank_ != 0) {
    store_->set(arrived(rank_), std::vector<uint8_t>{1});
    // Rank 0 answers within its timeout; wait for the answer as long as the group's.
    const auto deadline = started + std::max(timeout, options_->timeout);
    auto answered = [&] { return store_->check({released}) || store_->check({failed}); };
    auto nap = std::chrono::microseconds(100);
    while (!answered() && Clock::now() < deadline) {
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(20));
    }
    if (store_->check({released})) return;
    std::string why =
        "rank 0 did not answer within " + std::to_string(std::max(timeout, options_->timeout).count()) + " ms";
    if (store_->check({failed})) {
      const auto bytes = store_->get(failed);
      why = std::string(bytes.begin(), bytes.end());
    }
    TORCH_CHECK(false, "Rank ", rank_,
                " successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. "
                "Please check rank 0 logs for faulty rank. (chorus: ",
                why, ")");
  }
  std::vector<int> missing;
  std::vector<int> processed;
  for (int r = 1; r < size_; ++r) {
    // Without waitAllRanks each rank gets what is left of the timeout; with it, each gets
    // the whole timeout (as gloo's).
    const auto deadline = waitAllRanks ? Clock::now() + timeout : started + timeout;
    if (!waitAllRanks && Clock::now() > deadline) {
      std::ostringstream done;
      for (size_t i = 0; i < processed.size(); ++i) done << (i ? ", " : "") << processed[i];
      const std::string message =
          "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) + " ms. " +
          (processed.empty() ? std::string("No ranks successfully processed in monitoredBarrier.")
                             : "Successfully processed ranks: " + done.str());
      store_->set(failed, std::vector<uint8_t>(message.begin(), message.end()));
      TORCH_CHECK(false, message);
    }
    if (awaitStoreKey(*store_, arrived(r), deadline)) {
      processed.push_back(r);
      continue;
    }
    missing.push_back(r);
    if (!waitAllRanks) break;
  }
  if (missing.empty()) {
    store_->set(released, std::vector<uint8_t>{1});
    return;
  }
  std::ostringstream ranks;
  for (size_t i = 0; i < missing.size(); ++i) ranks << (i ? ", " : "") << missing[i];
  const std::string message = std::string("[Rank 0]: ") + (missing.size() == 1 && !waitAllRanks ? "Rank " : "Ranks ") +
                              ranks.str() + " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                              " ms";
  store_->set(failed, std::vector<uint8_t>(message.begin(), message.end()));
  TORCH_CHECK(false, message);
}

// ---- send and receive ----

c10::intrusive_ptr<c10d::Work> ChorusBackend::pointToPoint(const char* op, c10d::OpType type, const at::Tensor& tensor,
                                                           int peer, bool sending) {
  checkOpen(op);
  TORCH_CHECK(peer >= 0 && peer < size_, "chorus: ", op, ": ", sending ? "destination" : "source", " rank ", peer,
              " is out of range for a group of ", size_, " ranks");
  const Staged staged = stage(tensor, sending ? Staged::Use::Read : Staged::Use::Write);
  std::vector<at::Tensor> outputs;
  if (!sending) outputs.push_back(tensor);
  auto work = c10::make_intrusive<ChorusWork>(rank_, type, ++p2pSequence_, outputs, 1, profilingTitle(name_, type),
                                              std::vector<at::Tensor>{tensor});
  c10::intrusive_ptr<ChorusWork> all;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (coalescing_) {
      all = coalescing_->all;
      all->addPart(outputs);
    }
  }
  const int other = PeerChannels::pairPeer(sending);
  peers_->channel(peer, sending)
      .push(
          std::string(op) + (sending ? " to " : " from ") + std::to_string(peer),
          [staged, other, sending](ncclComm_t comm) {
            const at::Tensor& data = staged.buffer;
            return sending ? ncclSend(dataOf(data), byteSize(data), ncclUint8, other, comm, nullptr)
                           : ncclRecv(dataOf(data), byteSize(data), ncclUint8, other, comm, nullptr);
          },
          [work, all, staged, sending](ncclResult_t result, const std::string& why) {
            std::string failure = why;
            if (result == ncclSuccess && !sending) {
              try {
                at::NoGradGuard noGrad;
                staged.copyBack();
              } catch (const std::exception& e) {
                result = ncclInternalError;
                failure = std::string("after the receive: ") + e.what();
              }
            }
            work->complete(result, failure);
            if (all) all->complete(result, failure);
          });
  return work;
}

// Tags are ignored, as in PyTorch's NCCL backend: messages from one rank to another match in order.
c10::intrusive_ptr<c10d::Work> ChorusBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  return pointToPoint("send", c10d::OpType::SEND, singleTensor(tensors, "send"), dstRank, true);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  return pointToPoint("recv", c10d::OpType::RECV, singleTensor(tensors, "recv"), srcRank, false);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "chorus: recv from any source is not supported: Chorus, like NCCL, matches a receive to the "
              "rank that sends it; pass src= (gloo has recv from any source)");
}

}  // namespace chorus_torch
