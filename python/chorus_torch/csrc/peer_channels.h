// PeerChannels: the sends and receives of a chorus backend. Each (peer, direction) gets a
// communicator of its own, of two ranks (the sender is rank 0, the receiver rank 1), with
// its own CollectiveQueue: made on first use, on the queue's thread, from a unique id the
// sender puts in the group's store. So sends and receives are matched in order per
// sender and receiver (tags are ignored, as in PyTorch's NCCL backend), and any number
// can be in flight in any order: an irecv posted before its isend, a receive listed
// before the send in batch_isend_irecv, or every rank sending before it receives, wait
// only for their own peer.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Store.hpp>
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

  // The queue of this rank's sends to `peer` (sending) or of its receives from `peer`;
  // its communicator's other rank is pairPeer(sending).
  CollectiveQueue& channel(int peer, bool sending);
  static int pairPeer(bool sending) { return sending ? 1 : 0; }

  void setTimeout(std::chrono::milliseconds timeout);
  void abort(const std::string& why);
  std::vector<JobTiming> timings() const;

 private:
  ncclComm_t connect(int peer, bool sending, const std::function<bool()>& cancelled) const;

  const c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  std::atomic<int64_t> timeoutMs_;
  mutable std::mutex mutex_;
  std::map<std::pair<int, bool>, std::unique_ptr<CollectiveQueue>> channels_;
};

}  // namespace chorus_torch
