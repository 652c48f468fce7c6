// A connection's set-up wait: a peer's part of a handshake (a listener, shared slots) that
// comes once, within seconds. Polled, with 20 µs naps for the first 100 rounds and 1 ms
// naps after: set-up waits are few, so nothing here spins long or needs waking. Rule: for
// set-up only; a call's waits on its data are StepFifo's and sleep in the kernel.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus {

enum class SetUpPoll { kWaiting, kDone, kFailed };
enum class SetUpWaitEnd { kDone, kFailed, kAborted, kRevoked, kTimedOut };

// Polls `poll` (() -> SetUpPoll) until it is done or failed, the communicator is aborted
// or revoked (either flag may be null), or `limitSec` have passed. The caller WARNs; on
// kFailed, `poll` may have said why itself.
template <typename Poll>
SetUpWaitEnd awaitSetUp(Poll&& poll, const std::atomic<uint32_t>* abortFlag, const std::atomic<uint32_t>* revokeFlag,
                        double limitSec) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned round = 0;; ++round) {
    const SetUpPoll state = poll();
    if (state == SetUpPoll::kDone) return SetUpWaitEnd::kDone;
    if (state == SetUpPoll::kFailed) return SetUpWaitEnd::kFailed;
    if (abortFlag != nullptr && abortFlag->load(std::memory_order_relaxed)) return SetUpWaitEnd::kAborted;
    if (revokeFlag != nullptr && revokeFlag->load(std::memory_order_relaxed)) return SetUpWaitEnd::kRevoked;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limitSec)
      return SetUpWaitEnd::kTimedOut;
    timespec nap{0, round < 100 ? 20 * 1000 : 1000 * 1000};
    nanosleep(&nap, nullptr);
  }
}

}  // namespace chorus
