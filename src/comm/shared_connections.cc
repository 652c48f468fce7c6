#include "src/comm/shared_connections.h"

#include <algorithm>
#include <chrono>

#include "core/debug.h"

namespace chorus {

SharedConnections::~SharedConnections() {
  // The last member has gone: a peer still waiting on one of these FIFOs waits for a call no
  // member of this rank will make (as ncclComm::markDestroyed, direct FIFOs only).
  for (std::vector<Channel>& channels : kept_)
    for (Channel& ch : channels)
      for (auto* side : {&ch.send, &ch.recv})
        for (Connection& c : *side)
          if (c.connected() && c.resource != nullptr && !c.end.proxied) markBroken(c.end.ctrl, kBrokenByDestroy);
}

void SharedConnections::offer(ncclComm* parent) {
  if (!parent->sharedConns) parent->sharedConns = std::make_shared<SharedConnections>();
}

void SharedConnections::lend(Connection& lender, Connection* borrower) {
  std::lock_guard<std::mutex> lock(mutex_);
  Connection& used = lender.used();
  ++borrowers_[&used];
  borrower->borrowed = &used;
}

bool SharedConnections::lent(const Connection& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = borrowers_.find(&c);
  return it != borrowers_.end() && it->second > 0;
}

void SharedConnections::leave(std::vector<Channel>& channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool stillUsed = false;
  for (Channel& ch : channels) {
    for (auto* side : {&ch.send, &ch.recv}) {
      for (Connection& c : *side) {
        if (c.borrowed != nullptr) {
          const auto it = borrowers_.find(c.borrowed);
          if (it != borrowers_.end() && --it->second == 0) borrowers_.erase(it);
          c.borrowed = nullptr;
        }
        stillUsed = stillUsed || borrowers_.contains(&c);
      }
    }
  }
  // Moving the vector keeps every Channel (and so every Connection) where it is.
  if (stillUsed) kept_.push_back(std::move(channels));
}

uint64_t SharedConnections::takeTicket() {
  std::lock_guard<std::mutex> lock(mutex_);
  return nextTicket_++;
}

ncclResult_t SharedConnections::awaitTurn(uint64_t ticket, ncclComm* comm) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto start = std::chrono::steady_clock::now();
  while (serving_ != ticket) {
    // Polled too: an abort or revoke sets a flag, it does not notify.
    turnEnded_.wait_for(lock, std::chrono::milliseconds(1));
    if (comm->abortFlag.load() != 0 || comm->revokeFlag.load() != 0) {
      WARN("Rank %d: the communicator was %s while its work waited for another communicator sharing its connections",
           comm->rank, comm->abortFlag.load() != 0 ? "aborted (ncclCommAbort)" : "revoked");
      return ncclSystemError;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (comm->timeoutSec > 0 && waited > comm->timeoutSec) {
      WARN(
          "Rank %d: timed out after %.0f s (CHORUS_TIMEOUT) waiting for another communicator sharing this one's "
          "connections (splitShare/shrinkShare) to finish its work on this rank",
          comm->rank, waited);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

void SharedConnections::endTurn(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket != serving_) {
      endedEarly_.insert(ticket);
      return;
    }
    ++serving_;
    while (endedEarly_.erase(serving_) != 0) ++serving_;
  }
  turnEnded_.notify_all();
}

RunTurns::~RunTurns() { end(); }

void RunTurns::end() {
  for (const Place& place : places_) place.family->endTurn(place.ticket);
  places_.clear();
}

ncclResult_t RunTurns::queue(std::span<ncclComm* const> comms) {
  std::vector<std::pair<std::shared_ptr<SharedConnections>, ncclComm*>> wanted;
  for (ncclComm* comm : comms) {
    if (!comm->sharedConns) continue;
    for (const auto& [family, other] : wanted) {
      if (family != comm->sharedConns) continue;
      WARN(
          "ncclGroupEnd: invalid usage: communicators %p (rank %d) and %p (rank %d) share connections "
          "(splitShare/shrinkShare) and cannot run in one group: their steps would interleave on the same FIFOs",
          static_cast<void*>(other), other->rank, static_cast<void*>(comm), comm->rank);
      return ncclInvalidUsage;
    }
    wanted.emplace_back(comm->sharedConns, comm);
  }
  if (wanted.empty()) return ncclSuccess;
  static std::mutex issuing;  // every family's tickets of one launch at once
  std::lock_guard<std::mutex> lock(issuing);
  for (auto& [family, comm] : wanted) {
    const uint64_t ticket = family->takeTicket();
    places_.push_back(Place{std::move(family), comm, ticket});
  }
  return ncclSuccess;
}

ncclResult_t RunTurns::await() {
  for (const Place& place : places_) CHORUS_CHECK(place.family->awaitTurn(place.ticket, place.comm));
  return ncclSuccess;
}

}  // namespace chorus
