#include "backend_chorus.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "chorus.h"
#include "future_completer.h"
#include "tensor_types.h"

namespace chorus_torch {

namespace {

constexpr const char* kUniqueIdKey = "unique_id";

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

// The group's keys, under the number of groups of this name and size made before it in
// this store: a store outlives destroy_process_group, and a group made again gets the same
// name (PyTorch counts groups from 0 again), so fixed keys would hand it the last one's
// unique ids and barrier answers. Every rank of a group adds once, and every rank of one
// group has added before any rank makes the next (the communicator's set-up needs them
// all); the size keeps a name that comes back with other members apart.
c10::intrusive_ptr<c10d::Store> storeOfThisGroup(const c10::intrusive_ptr<c10d::Store>& store, int size) {
  const std::string sized = "chorus/" + std::to_string(size);
  const int64_t joined = store->add(sized + "/ranks_joined", 1);
  return c10::make_intrusive<c10d::PrefixStore>(sized + "/" + std::to_string((joined - 1) / size), store);
}

// A store of its own for the backend's threads (a TCPStore client is one connection).
c10::intrusive_ptr<c10d::Store> ownStore(const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    return store->clone();
  } catch (const std::exception&) {
    return store;
  }
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
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      name_(std::move(name)),
      store_(storeOfThisGroup(store, size)) {
  queue_ =
      std::make_unique<CollectiveQueue>(joinCommunicator(store_, rank, size, options_->timeout), options_->timeout);
  peers_ = std::make_unique<PeerChannels>(ownStore(store_), rank, options_->timeout);
  init();
}

ChorusBackend::ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, ncclComm_t comm, int rank, int size,
                             c10::intrusive_ptr<Options> options, std::string name)
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      name_(std::move(name)),
      store_(storeOfThisGroup(store, size)) {
  queue_ = std::make_unique<CollectiveQueue>(comm, options_->timeout);
  peers_ = std::make_unique<PeerChannels>(ownStore(store_), rank, options_->timeout);
  init();
}

ChorusBackend::~ChorusBackend() { close(); }

c10::intrusive_ptr<ChorusOptions> ChorusBackend::childOptions(
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) const {
  if (auto options = c10::dynamic_intrusive_pointer_cast<Options>(opts)) return options;
  if (!opts) return c10::make_intrusive<Options>(options_->timeout);
  // Another backend's options: keep what they say that applies here.
  auto options = c10::make_intrusive<Options>(opts->timeout);
  options->group_name = opts->group_name;
  options->group_desc = opts->group_desc;
  options->global_ranks_in_group = opts->global_ranks_in_group;
  return options;
}

// The communicator a split or shrink made (non-blocking), once ready; "" or why not (then
// it is aborted, as it is where the split or shrink failed already: `failure`).
std::string ChorusBackend::awaitChild(ncclComm_t child, std::chrono::milliseconds timeout, const std::string& failure) {
  if (child == nullptr) return failure;
  if (!failure.empty()) {
    ncclCommAbort(child);
    return failure;
  }
  ncclResult_t ready = ncclInProgress;
  withoutGil([&] { ready = CollectiveQueue::awaitComm(child, Clock::now() + timeout); });
  if (ready == ncclSuccess) return "";
  ncclCommAbort(child);
  return "the new communicator did not get ready: " +
         (ready == ncclInProgress ? std::string("timed out") : describeResult(ready));
}

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
  auto options = childOptions(opts);
  // Issued on this group's queue, so it is ordered with the collectives queued before it;
  // the job ends when the parent has settled, which includes the child's set-up.
  auto child = std::make_shared<ncclComm_t>(nullptr);
  std::string failure = onQueue("split", options->timeout, [child, color, key](ncclComm_t parent) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return ncclCommSplit(parent, color, key, child.get(), &config);
  });
  failure = awaitChild(*child, options->timeout, failure);
  TORCH_CHECK(failure.empty(), "chorus: split: ", failure);
  if (!member) return nullptr;
  TORCH_CHECK(*child != nullptr, "chorus: split: ncclCommSplit gave rank ", rank_, " no communicator");
  return c10::make_intrusive<ChorusBackend>(store, *child, key, static_cast<int>(ranks.size()), options, name_);
}

c10::intrusive_ptr<c10d::Backend> ChorusBackend::shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                                        const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  checkOpen("shrink");
  TORCH_CHECK(shrinkFlags == NCCL_SHRINK_DEFAULT || shrinkFlags == NCCL_SHRINK_ABORT, "chorus: shrink: flags ",
              shrinkFlags, " are neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  // Checked before anything stops, as ncclCommShrink would.
  TORCH_CHECK(!ranksToExclude.empty() && static_cast<int64_t>(ranksToExclude.size()) < size_,
              "chorus: shrink: ", ranksToExclude.size(), " ranks to exclude from a group of ", size_);
  for (size_t i = 0; i < ranksToExclude.size(); ++i) {
    const int64_t r = ranksToExclude[i];
    TORCH_CHECK(r >= 0 && r < size_ && r != rank_, "chorus: shrink: rank ", r,
                r == rank_ ? " is this rank (excluded ranks do not call shrink)" : " is not in the group");
    TORCH_CHECK(std::find(ranksToExclude.begin() + i + 1, ranksToExclude.end(), r) == ranksToExclude.end(),
                "chorus: shrink: rank ", r, " is listed twice");
  }
  auto excluded = std::make_shared<std::vector<int>>(ranksToExclude.begin(), ranksToExclude.end());
  auto options = childOptions(opts);
  auto child = std::make_shared<ncclComm_t>(nullptr);
  auto shrinkWith = [child, excluded, shrinkFlags](ncclComm_t parent) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return ncclCommShrink(parent, excluded->data(), static_cast<int>(excluded->size()), child.get(), &config,
                          shrinkFlags);
  };
  std::string failure;
  if (shrinkFlags == NCCL_SHRINK_DEFAULT) {
    // Ordered with the collectives queued before it, as a split.
    failure = onQueue("shrink", options->timeout, shrinkWith);
  } else {
    // Past work that may never end (a dead or silent rank): the queue stops issuing and
    // fails what it runs, and the shrink stops that work and revokes the communicator.
    const std::string why = "the group was shrunk with SHRINK_ABORT (shrink_group)";
    withoutGil([&] { queue_->revoke(why); });  // returns once the work in flight has stopped
    peers_->abort(why);
    ncclResult_t result = ncclInProgress;
    withoutGil([&] { result = shrinkWith(queue_->comm()); });
    if (result != ncclSuccess && result != ncclInProgress) failure = "ncclCommShrink failed: " + describeResult(result);
  }
  failure = awaitChild(*child, options->timeout, failure);
  TORCH_CHECK(failure.empty(), "chorus: shrink: ", failure,
              shrinkFlags == NCCL_SHRINK_DEFAULT ? " (past a failed rank, shrink with SHRINK_ABORT)" : "");
  TORCH_CHECK(*child != nullptr, "chorus: shrink: ncclCommShrink gave rank ", rank_, " no communicator");
  int rank = 0;
  int size = 0;
  TORCH_CHECK(ncclCommUserRank(*child, &rank) == ncclSuccess && ncclCommCount(*child, &size) == ncclSuccess,
              "chorus: shrink: the new communicator does not say its rank and size");
  // The new group's keys (its sends' unique ids) apart from this group's: the surviving
  // ranks shrink this group in the same order, so they count alike.
  auto store = c10::make_intrusive<c10d::PrefixStore>("shrink/" + std::to_string(shrinks_++), store_);
  return c10::make_intrusive<ChorusBackend>(store, *child, rank, size, options, name_);
}

// Runs `issue` as a job of this group's queue and waits for it (without the GIL): "" or why it failed.
std::string ChorusBackend::onQueue(const char* op, std::chrono::milliseconds timeout, CollectiveQueue::Issue issue) {
  auto done = std::make_shared<std::promise<std::string>>();
  std::future<std::string> outcome = done->get_future();
  queue_->push(
      op, std::move(issue),
      [done](ncclResult_t result, const std::string& message) {
        done->set_value(result == ncclSuccess ? std::string() : message);
      },
      timeout);
  std::string failure;
  withoutGil([&] { failure = outcome.get(); });
  return failure;
}

void ChorusBackend::close() {
  if (closed_.exchange(true)) return;
  withoutGil([this] {
    peers_.reset();
    queue_.reset();
    // The works' futures too, whose callbacks must not run while the interpreter shuts down
    // (bounded: a callback may be blocked for good).
    FutureCompleter::instance().drain(std::chrono::steady_clock::now() + std::chrono::seconds(10));
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
      work->setHeldInBlock(true);
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
  if (coalescing_) {
    // A block that never ended (an exception inside _coalescing_manager leaves it open, and
    // ProcessGroupNCCL goes on there too): its collectives were never issued; they fail
    // rather than run late, out of order with the other ranks' calls.
    const size_t dropped = coalescing_->works.size();
    TORCH_WARN("chorus: startCoalescing: the previous coalescing block never ended (endCoalescing was not called, ",
               "as after an exception inside _coalescing_manager); its ", dropped,
               " collective(s) were not issued and fail");
    const std::string why = "this collective was recorded in a coalescing block that never ended; it was not issued";
    for (const auto& work : coalescing_->works) {
      work->setHeldInBlock(false);
      work->complete(ncclInvalidUsage, why);
    }
    coalescing_->all->complete(ncclInvalidUsage, why);
  }
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
  for (const auto& work : block->works) work->setHeldInBlock(false);
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

// ---- send and receive ----

c10::intrusive_ptr<c10d::Work> ChorusBackend::pointToPoint(const char* op, c10d::OpType type, const at::Tensor& tensor,
                                                           int peer, int tag, bool sending) {
  checkOpen(op);
  TORCH_CHECK(peer >= 0 && peer < size_, "chorus: ", op, ": ", sending ? "destination" : "source", " rank ", peer,
              " is out of range for a group of ", size_, " ranks");
  const Staged staged = stage(tensor, sending ? Staged::Use::Read : Staged::Use::Write);
  CollectiveQueue& channel = peers_->channel(peer, sending, tag);
  std::vector<at::Tensor> outputs;
  if (!sending) outputs.push_back(tensor);
  auto work = c10::make_intrusive<ChorusWork>(rank_, type, ++p2pSequence_, outputs, 1, profilingTitle(name_, type),
                                              std::vector<at::Tensor>{tensor});
  if (!sending) work->setSourceRank(peer);
  c10::intrusive_ptr<ChorusWork> all;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (coalescing_) {
      all = coalescing_->all;
      all->addPart(outputs);
    }
  }
  const int other = PeerChannels::pairPeer(sending);
  std::string label = std::string(op) + (sending ? " to " : " from ") + std::to_string(peer);
  if (tag != 0) label.append(" with tag ").append(std::to_string(tag));
  channel.push(
      std::move(label),
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

// Messages from one rank to another match in order per tag, as gloo's do.
c10::intrusive_ptr<c10d::Work> ChorusBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint("send", c10d::OpType::SEND, singleTensor(tensors, "send"), dstRank, tag, true);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint("recv", c10d::OpType::RECV, singleTensor(tensors, "recv"), srcRank, tag, false);
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "chorus: recv from any source is not supported: Chorus, like NCCL, matches a receive to the "
              "rank that sends it; pass src= (gloo has recv from any source)");
}

}  // namespace chorus_torch
