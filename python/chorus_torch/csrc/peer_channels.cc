#include "peer_channels.h"

#include <cstring>
#include <stdexcept>
#include <thread>

#include "chorus.h"

namespace chorus_torch {

bool awaitStoreKey(c10d::Store& store, const std::string& key, Clock::time_point deadline,
                   const std::function<bool()>& cancelled) {
  auto nap = std::chrono::microseconds(100);
  for (;;) {
    if (store.check({key})) return true;
    if (Clock::now() >= deadline || (cancelled && cancelled())) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(20));
  }
}

PeerChannels::PeerChannels(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), timeoutMs_(timeout.count()) {}

PeerChannels::~PeerChannels() {
  std::lock_guard<std::mutex> lock(mutex_);
  channels_.clear();
}

CollectiveQueue& PeerChannels::channel(int peer, bool sending, int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = channels_.find({peer, sending, tag});
  if (found != channels_.end()) return *found->second;
  size_t& tags = tagCounts_[{peer, sending}];
  TORCH_CHECK(tags < kMaxTags, "chorus: ", sending ? "send to " : "recv from ", peer, " with tag ", tag, ": this rank ",
              "already ", sending ? "sent to" : "received from", " that rank with ", kMaxTags,
              " other tags, the most it keeps (each tag is a channel of its own, with its thread and connection); ",
              "reuse tags, or leave them out: messages of one tag match in order");
  ++tags;
  auto& slot = channels_[{peer, sending, tag}];
  slot = std::make_unique<CollectiveQueue>(
      [this, peer, sending, tag](const std::function<bool()>& cancelled) {
        return connect(peer, sending, tag, cancelled);
      },
      std::chrono::milliseconds(timeoutMs_.load()));
  return *slot;
}

// On the channel's thread, before its first job: the sender makes the unique id and puts
// it in the store; the receiver waits for it there. Then both join, bounded by the
// group's timeout (a receive whose sender never comes fails then).
ncclComm_t PeerChannels::connect(int peer, bool sending, int tag, const std::function<bool()>& cancelled) const {
  const int src = sending ? rank_ : peer;
  const int dst = sending ? peer : rank_;
  // Appended, not "literal" + std::to_string(): GCC 12 warns (-Wrestrict) on that form.
  const std::string tagNumber = std::to_string(tag);
  std::string what = "the " + std::string(sending ? "send" : "receive") + " channel " + std::to_string(src) + " -> " +
                     std::to_string(dst);
  std::string key = "p2p/" + std::to_string(src) + "->" + std::to_string(dst);
  if (tag != 0) {
    what.append(" tag ").append(tagNumber);
    key.append("/").append(tagNumber);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs_.load());
  ncclUniqueId id;
  if (sending) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    if (made != ncclSuccess) throw std::runtime_error(what + ": ncclGetUniqueId failed: " + describeResult(made));
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store_->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    if (!awaitStoreKey(*store_, key, deadline, cancelled)) {
      throw std::runtime_error(what + ": rank " + std::to_string(peer) + " never sent" +
                               (cancelled() ? " (the group was aborted)"
                                            : " within the timeout (" + std::to_string(timeoutMs_.load()) + " ms)"));
    }
    const std::vector<uint8_t> bytes = store_->get(key);
    if (bytes.size() != sizeof(id)) {
      throw std::runtime_error(what + ": the store's unique id has " + std::to_string(bytes.size()) + " bytes");
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = chorusCommInitRankExecutor(&comm, 2, id, sending ? 0 : 1, &config, chorusExecutorCpu);
  if (result != ncclSuccess && result != ncclInProgress) {
    throw std::runtime_error(what + ": chorusCommInitRankExecutor failed: " + describeResult(result));
  }
  result = CollectiveQueue::awaitComm(comm, deadline, cancelled);
  if (result != ncclSuccess) {
    const std::string why = result != ncclInProgress ? describeResult(result)
                            : cancelled()            ? std::string("the group was aborted")
                                          : "rank " + std::to_string(peer) + " did not join within the timeout";
    ncclCommAbort(comm);
    throw std::runtime_error(what + ": joining failed: " + why);
  }
  return comm;
}

void PeerChannels::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_.store(timeout.count());
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, queue] : channels_) queue->setTimeout(timeout);
}

void PeerChannels::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, queue] : channels_) queue->abort(why);
}

std::vector<JobTiming> PeerChannels::timings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<JobTiming> all;
  for (const auto& [key, queue] : channels_) {
    auto some = queue->timings();
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

}  // namespace chorus_torch
