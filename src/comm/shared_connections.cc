#include "src/comm/shared_connections.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/debug.h"

namespace chorus {
namespace {

// Its owner and every borrower have gone: a peer still waiting on one of these FIFOs waits
// for a call no member of this rank will make.
void markDestroyed(std::vector<Channel>& channels) {
  for (Channel& ch : channels) ch.forEachConnection(markDestroyedFifo);
}

}  // namespace

SharedConnections::~SharedConnections() {
  for (std::vector<Channel>& channels : kept_) markDestroyed(channels);
}

void SharedConnections::offer(ncclComm* parent) {
  if (!parent->sharedConns) parent->sharedConns = std::make_shared<SharedConnections>();
}

bool SharedConnections::lendable(const ncclComm* lender, std::span<const int> members) {
  for (const Channel& ch : lender->channels) {
    for (int peer : members) {
      for (const Connection* c : {&ch.send[peer], &ch.recv[peer]}) {
        if (!c->used().connected() || __atomic_load_n(&c->used().end.ctrl->broken, __ATOMIC_ACQUIRE) == 0) continue;
        INFO(kSubsysInit,
             "rank %d: connections not shared with the parent communicator: its connection %s rank %d is broken",
             lender->rank, c == &ch.send[peer] ? "to" : "from", peer);
        return false;
      }
    }
  }
  return true;
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
  std::vector<std::vector<Channel>> unused;  // kept channels no member uses any more: freed below
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Channel& ch : channels) {
      ch.forEachConnection([&](Connection& c) {
        if (c.borrowed == nullptr) return;
        const auto it = borrowers_.find(c.borrowed);
        if (it != borrowers_.end() && --it->second == 0) borrowers_.erase(it);
        c.borrowed = nullptr;
      });
    }
    // Moving a vector keeps every Channel (and so every Connection) where it is. Channels not
    // kept go with their member; one the member did not mark (lent then) is marked here.
    if (anyBorrowed(channels)) {
      kept_.push_back(std::move(channels));
    } else {
      markDestroyed(channels);
    }
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (anyBorrowed(*it)) {
        ++it;
        continue;
      }
      unused.push_back(std::move(*it));
      it = kept_.erase(it);
    }
  }
  for (std::vector<Channel>& kept : unused) markDestroyed(kept);
}

bool SharedConnections::anyBorrowed(std::vector<Channel>& channels) {
  bool borrowed = false;
  for (Channel& ch : channels)
    ch.forEachConnection([&](const Connection& c) { borrowed = borrowed || borrowers_.contains(&c); });
  return borrowed;
}

uint64_t SharedConnections::takeTicket() {
  std::lock_guard<std::mutex> lock(mutex_);
  return nextTicket_++;
}

ncclResult_t SharedConnections::awaitTurn(uint64_t ticket, ncclComm* comm) {
  std::unique_lock<std::mutex> lock(mutex_);
  // CHORUS_TIMEOUT counts time without progress: the turns before this one moving is some.
  auto start = std::chrono::steady_clock::now();
  uint64_t served = serving_;
  while (serving_ != ticket) {
    // Polled too: an abort or revoke sets a flag, it does not notify.
    turnEnded_.wait_for(lock, std::chrono::milliseconds(1));
    if (serving_ != served) {
      served = serving_;
      start = std::chrono::steady_clock::now();
    }
    if (comm->abortFlag.load() != 0 || comm->revokeFlag.load() != 0) {
      WARN("Rank %d: the communicator was %s while its work waited for another communicator sharing its connections",
           comm->rank, comm->abortFlag.load() != 0 ? "aborted (ncclCommAbort)" : "revoked");
      return ncclSystemError;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (comm->timeoutSec > 0 && waited > comm->timeoutSec) {
      WARN(
          "Rank %d: timed out: %.0f s (CHORUS_TIMEOUT) without progress of the communicators sharing this one's "
          "connections (splitShare/shrinkShare) whose turns come first on this rank",
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

void RunTurns::queueTogether(std::vector<Launch>& launches) {
  // A launch goes by its first member's tag: every rank sorts its launches of one group alike.
  auto firstTag = [](const Launch& l) {
    uint64_t tag = UINT64_MAX;
    for (const ncclComm* comm : l.comms) tag = std::min(tag, comm->stampTag);
    return tag;
  };
  std::stable_sort(launches.begin(), launches.end(),
                   [&](const Launch& a, const Launch& b) { return firstTag(a) < firstTag(b); });
  static std::mutex issuing;
  std::lock_guard<std::mutex> lock(issuing);
  for (const Launch& launch : launches) {
    std::vector<Place>& places = launch.turns->places_;
    for (ncclComm* comm : launch.comms) {
      // One ticket per family: the launch runs its members in rounds on that one turn.
      const bool held =
          std::any_of(places.begin(), places.end(), [&](const Place& p) { return p.family == comm->sharedConns; });
      if (comm->sharedConns && !held) places.push_back(Place{comm->sharedConns, comm, comm->sharedConns->takeTicket()});
    }
  }
}

bool RunTurns::anyFamilyTwice(std::span<ncclComm* const> comms) {
  for (size_t i = 0; i < comms.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (comms[i]->sharedConns && comms[i]->sharedConns == comms[j]->sharedConns) return true;
  return false;
}

std::vector<std::vector<ncclComm*>> RunTurns::rounds(std::span<ncclComm* const> comms) {
  std::vector<ncclComm*> byTag(comms.begin(), comms.end());
  std::stable_sort(byTag.begin(), byTag.end(),
                   [](const ncclComm* a, const ncclComm* b) { return a->stampTag < b->stampTag; });
  std::vector<std::vector<ncclComm*>> out;
  for (ncclComm* comm : byTag) {
    // The first round without a member of its family (without sharing: the first).
    size_t r = 0;
    while (r < out.size() && comm->sharedConns && std::any_of(out[r].begin(), out[r].end(), [&](const ncclComm* c) {
             return c->sharedConns == comm->sharedConns;
           }))
      ++r;
    if (r == out.size()) out.emplace_back();
    out[r].push_back(comm);
  }
  return out;
}

ncclResult_t RunTurns::await() {
  for (const Place& place : places_) CHORUS_CHECK(place.family->awaitTurn(place.ticket, place.comm));
  return ncclSuccess;
}

}  // namespace chorus
