// PeerChannels: the sends and receives of a chorus backend. Each (peer, direction, tag)
// gets a communicator of its own, of two ranks (the sender is rank 0, the receiver rank
// 1), with its own CollectiveQueue: made on first use, on the queue's thread, from a
// unique id the sender puts in the group's store. So sends and receives are matched in
// order per sender, receiver and tag, as gloo matches them (a receive of tag 2 takes the
// send of tag 2 even when a send of tag 1 came first), and any number can be in flight
// in any order: an irecv posted before its isend, a receive listed before the send in
// batch_isend_irecv, or every rank sending before it receives, wait only for their own
// peer. Each tag costs a thread and a communicator, so a rank keeps at most kMaxTags
// tags per peer and direction, and refuses a message with one more.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <tuple>
#include <utility>

#include "collective_queue.h"

namespace chorus_torch {

// Polls `store` until it holds `key` (true), `deadline` passes or `cancelled` says so
// (false). Polling with check() never blocks the store's connection, which other threads
// of the process may share.
bool awaitStoreKey(c10d::Store& store, const std::string& key, Clock::time_point deadline,
                   const std::function<bool()>& cancelled = {});

class PeerChannels {
 public:
  PeerChannels(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout);
  ~PeerChannels();  // every channel runs what is queued, then destroys its communicator

  static constexpr size_t kMaxTags = 64;

  // The queue of this rank's sends to `peer` (sending) or of its receives from `peer`
  // with `tag`; its communicator's other rank is pairPeer(sending). Raises for a tag
  // past the first kMaxTags of that peer and direction.
  CollectiveQueue& channel(int peer, bool sending, int tag);
  static int pairPeer(bool sending) { return sending ? 1 : 0; }

  void setTimeout(std::chrono::milliseconds timeout);
  void abort(const std::string& why);
  std::vector<JobTiming> timings() const;

 private:
  ncclComm_t connect(int peer, bool sending, int tag, const std::function<bool()>& cancelled) const;

  const c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  std::atomic<int64_t> timeoutMs_;
  mutable std::mutex mutex_;
  std::map<std::tuple<int, bool, int>, std::unique_ptr<CollectiveQueue>> channels_;
  std::map<std::pair<int, bool>, size_t> tagCounts_;  // channels per (peer, direction)
};

}  // namespace chorus_torch
