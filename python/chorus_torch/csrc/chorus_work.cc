#include "chorus_work.h"

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "future_completer.h"

namespace chorus_torch {

const char* profilingTitle(const std::string& prefix, c10d::OpType type) {
  const char* op = "unknown";
  switch (type) {
    case c10d::OpType::BROADCAST:
      op = "broadcast";
      break;
    case c10d::OpType::ALLREDUCE:
      op = "all_reduce";
      break;
    case c10d::OpType::ALLREDUCE_COALESCED:
      op = "all_reduce";
      break;  // as gloo names it
    case c10d::OpType::_ALLREDUCE_SPARSE:
      op = "sparse_all_reduce";
      break;  // as gloo names it
    case c10d::OpType::REDUCE:
      op = "reduce";
      break;
    case c10d::OpType::ALLGATHER:
      op = "all_gather";
      break;
    case c10d::OpType::_ALLGATHER_BASE:
      op = "all_gather_into_tensor";
      break;
    case c10d::OpType::ALLGATHER_COALESCED:
      op = "all_gather_coalesced";
      break;
    case c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED:
      op = "all_gather_into_tensor_coalesced";
      break;
    case c10d::OpType::GATHER:
      op = "gather";
      break;
    case c10d::OpType::SCATTER:
      op = "scatter";
      break;
    case c10d::OpType::REDUCE_SCATTER:
      op = "reduce_scatter";
      break;
    case c10d::OpType::_REDUCE_SCATTER_BASE:
      op = "reduce_scatter_tensor";
      break;
    case c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED:
      op = "reduce_scatter_tensor_coalesced";
      break;
    case c10d::OpType::ALLTOALL_BASE:
      op = "all_to_all";
      break;
    case c10d::OpType::ALLTOALL:
      op = "all_to_all";
      break;
    case c10d::OpType::SEND:
      op = "send";
      break;
    case c10d::OpType::RECV:
      op = "recv";
      break;
    case c10d::OpType::BARRIER:
      op = "barrier";
      break;
    case c10d::OpType::COALESCED:
      op = "coalesced";
      break;
    default:
      break;
  }
  static std::mutex mutex;
  static std::set<std::string> titles;  // nodes never move: their c_str() stays valid
  std::lock_guard<std::mutex> lock(mutex);
  return titles.insert(prefix + ":" + op).first->c_str();
}

ChorusWork::ChorusWork(int rank, c10d::OpType type, uint64_t sequence, std::vector<at::Tensor> outputs, int parts,
                       const char* profilingTitle, const std::vector<at::Tensor>& inputs)
    : c10d::Work(rank, type, profilingTitle, std::optional<std::vector<at::Tensor>>(inputs)),
      sequence_(sequence),
      outputs_(std::move(outputs)),
      pending_(parts),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

std::vector<at::Tensor> ChorusWork::result() {
  std::lock_guard<std::mutex> lock(partsMutex_);
  return outputs_;
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(!heldInBlock_, "chorus: wait() on a collective recorded in a coalescing block that has not ended: it ",
              "is issued when the block ends (endCoalescing, the end of _coalescing_manager's with block), so this ",
              "wait would never return. Inside the block pass async_op=True and wait after it; if an exception left ",
              "a block open, the next block drops its calls");
  // The future completes on a completer thread right after the work (with its error, when
  // wait() raises it). Not waited for from a callback: its completion may be queued behind
  // the callback's own, and would run only once the completer gave up on that one.
  const bool settleFuture = !FutureCompleter::onCompleterThread();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool done = false;
  try {
    done = c10d::Work::wait(timeout);
  } catch (...) {
    if (settleFuture && c10d::Work::isCompleted()) settle(timeout == kNoTimeout, deadline);  // not after a time-out
    throw;
  }
  if (settleFuture) settle(timeout == kNoTimeout, deadline);
  return done;
}

// Waits for the future, within the caller's time-out when it gave one: the work itself is
// complete by then, and the future's completion may sit behind a slow callback on the
// completer (one that the caller's own time-out should not outlast).
void ChorusWork::settle(bool unbounded, std::chrono::steady_clock::time_point deadline) {
  if (unbounded) {
    future_->wait();
    return;
  }
  while (!future_->completed() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

bool ChorusWork::isCompleted() { return c10d::Work::isCompleted() && future_->completed(); }

void ChorusWork::addPart(const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(partsMutex_);
  ++pending_;
  outputs_.insert(outputs_.end(), outputs.begin(), outputs.end());
}

void ChorusWork::complete(ncclResult_t result, const std::string& message) {
  std::vector<at::Tensor> outputs;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(partsMutex_);
    if (result != ncclSuccess && error_.empty()) error_ = message.empty() ? std::string("failed") : message;
    if (--pending_ > 0) return;
    outputs = outputs_;
    error = error_;
  }
  // The work first: a caller woken by the future then finds the work completed too. The
  // future on the completer's threads: its callbacks may wait for this queue's next jobs.
  if (error.empty()) {
    finish();
    FutureCompleter::instance().post(
        [future = future_, outputs = std::move(outputs)] { future->markCompleted(c10::IValue(outputs)); });
    return;
  }
  auto exception = std::make_exception_ptr(std::runtime_error("chorus: " + error));
  finish(exception);
  FutureCompleter::instance().post([future = future_, exception] { future->setError(exception); });
}

}  // namespace chorus_torch
