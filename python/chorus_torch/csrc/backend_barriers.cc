// barrier and monitored_barrier: a one-element AllReduce, and rank 0 taking the others'
// arrivals through the group's store (as gloo's takes them through send/recv).
#include <algorithm>
#include <sstream>

#include "backend_chorus.h"
#include "peer_channels.h"  // awaitStoreKey
#include "tensor_types.h"

namespace chorus_torch {

// An AllReduce of one element: every rank's earlier collectives are done once it completes.
c10::intrusive_ptr<c10d::Work> ChorusBackend::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor token = at::zeros({1}, at::kFloat);
  Call call{[token](ncclComm_t comm) {
              return ncclAllReduce(dataOf(token), dataOf(token), 1, ncclFloat32, ncclSum, comm, nullptr);
            },
            {}};
  return collective("barrier", c10d::OpType::BARRIER, {}, {}, {call}, opts.timeout);
}

// Through the store, as gloo's does through send/recv: every other rank reports its
// arrival, rank 0 waits for each (bounded by the timeout) and then releases them, or names
// the ranks that did not arrive (the first, or all of them with waitAllRanks) and tells
// the others that the barrier failed.
void ChorusBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  checkOpen("monitored_barrier");
  const auto timeout = opts.timeout.count() >= 0 ? opts.timeout : options_->timeout;
  const auto started = Clock::now();
  const std::string prefix = "monitored_barrier/" + std::to_string(monitoredBarriers_++) + "/";
  auto arrived = [&](int r) { return prefix + "arrived/" + std::to_string(r); };
  // Rank 0's answer: kReleased, or why the barrier failed. The others count their reads of
  // a release, and the last one says all have read it, which rank 0 waits for: it may end
  // its process, and with it often the store's server, right after the barrier.
  const std::string answer = prefix + "answer";
  const std::string reads = prefix + "reads";
  const std::string allRead = prefix + "all_read";
  static const std::string kReleased = "released";
  auto tell = [&](const std::string& what) { store_->set(answer, std::vector<uint8_t>(what.begin(), what.end())); };
  if (size_ == 1) return;
  if (rank_ != 0) {
    store_->set(arrived(rank_), std::vector<uint8_t>{1});
    // Rank 0 answers within its timeout; wait for the answer as long as the group's.
    const auto patience = std::max(timeout, options_->timeout);
    std::string why = "rank 0 did not answer within " + std::to_string(patience.count()) + " ms";
    if (awaitStoreKey(*store_, answer, started + patience)) {
      const std::vector<uint8_t> bytes = store_->get(answer);
      why.assign(bytes.begin(), bytes.end());
      if (why == kReleased) {
        if (store_->add(reads, 1) == size_ - 1) store_->set(allRead, std::vector<uint8_t>{1});
        return;
      }
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
      tell(message);
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
    tell(kReleased);
    awaitStoreKey(*store_, allRead, Clock::now() + timeout);  // passed either way; see `reads`
    return;
  }
  std::ostringstream ranks;
  for (size_t i = 0; i < missing.size(); ++i) ranks << (i ? ", " : "") << missing[i];
  const std::string message = std::string("[Rank 0]: ") + (missing.size() == 1 && !waitAllRanks ? "Rank " : "Ranks ") +
                              ranks.str() + " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                              " ms";
  tell(message);
  TORCH_CHECK(false, message);
}

}  // namespace chorus_torch
