#include "src/comm/comm_registry.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

#include "src/comm/comm.h"

namespace chorus {
namespace {

std::mutex gRegistryMutex;
// The latest communicator found live (a loop over one communicator skips the lock); cleared
// when it is closed or unregistered.
std::atomic<const ncclComm*> gLastLive{nullptr};
std::unordered_set<const ncclComm*>& registry() {
  static std::unordered_set<const ncclComm*> live;
  return live;
}

// Calls between their liveness check and their count in ncclComm::calls. A pin counts
// itself in here before the check, and closeComm waits for the counter to be empty once
// after the removal (all seq_cst): either the check sees the communicator closed, or
// closeComm sees the call entering and waits until it has counted itself in `calls`. Spread
// over a few cache lines by address, so that threads on different communicators do not
// share one.
struct alignas(64) EntryCounter {
  std::atomic<int> entering{0};
};
std::array<EntryCounter, 16> gEntering;
EntryCounter& entryCounterOf(const ncclComm* comm) {
  return gEntering[(reinterpret_cast<uintptr_t>(comm) >> 6) % gEntering.size()];
}

// Under gRegistryMutex.
bool registeredLocked(const ncclComm* comm) { return registry().count(comm) != 0 && comm->magic == ncclComm::kMagic; }

// Whether `comm` is registered; it may be freed right after unless the caller counted itself
// in (CommPin).
bool isLiveComm(const ncclComm* comm) {
  // seq_cst, with CommPin's count before it and closeComm's clearing (EntryCounter says why).
  if (comm != nullptr && comm == gLastLive.load()) return true;
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  const bool live = registeredLocked(comm);
  if (live) gLastLive.store(comm);
  return live;
}

}  // namespace

void registerComm(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  registry().insert(comm);
}

void unregisterComm(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  registry().erase(comm);
  const ncclComm* removed = comm;
  gLastLive.compare_exchange_strong(removed, nullptr);
}

void forEachLiveComm(const std::function<void(const ncclComm&)>& visit) {
  std::lock_guard<std::mutex> lock(gRegistryMutex);
  for (const ncclComm* comm : registry())
    if (comm->magic == ncclComm::kMagic) visit(*comm);
}

CommPin::CommPin(ncclComm* comm, uint64_t serial) {
  if (comm == nullptr) return;
  EntryCounter& counter = entryCounterOf(comm);
  counter.entering.fetch_add(1);  // before the check (EntryCounter says why)
  if (isLiveComm(comm) && (serial == 0 || comm->serial == serial)) {
    comm->calls.fetch_add(1);
    comm_ = comm;
  }
  counter.entering.fetch_sub(1);
}

CommPin& CommPin::operator=(CommPin&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, nullptr);
  }
  return *this;
}

void CommPin::release() {
  if (comm_ == nullptr) return;
  comm_->calls.fetch_sub(1);  // last: the communicator may be freed from here on
  comm_ = nullptr;
}

bool closeComm(ncclComm* comm, uint64_t serial) {
  {
    std::lock_guard<std::mutex> lock(gRegistryMutex);
    if (!registeredLocked(comm) || (serial != 0 && comm->serial != serial)) return false;
    registry().erase(comm);
    const ncclComm* removed = comm;
    gLastLive.compare_exchange_strong(removed, nullptr);
  }
  // A call that counted itself in before the removal may still be about to pin: wait for
  // the counter to be empty once. Any call counted in later finds the communicator gone.
  const EntryCounter& counter = entryCounterOf(comm);
  while (counter.entering.load() != 0) std::this_thread::yield();
  return true;
}

void waitForCallsToLeave(const ncclComm* comm) {
  // Spin briefly (a query leaves within microseconds), then nap: a call may be a blocking
  // collective that has yet to see an abort flag.
  for (int spins = 0; comm->calls.load() != 0; ++spins) {
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

bool freeComm(ncclComm* comm, uint64_t serial) {
  if (!closeComm(comm, serial)) return false;
  waitForCallsToLeave(comm);
  delete comm;
  return true;
}

}  // namespace chorus
