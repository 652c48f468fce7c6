// Sleeping on a 32-bit word until another thread or process changes it (Linux futex).
// The FIFO waits of the CPU executor and the proxy's publishes share it: a waiter sleeps
// on the low word of a FIFO counter, the publisher wakes it after its store.
//
// Not FUTEX_PRIVATE: the word may sit in memory shared with another process (SHM).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

namespace chorus {

// A relative timeout of `us` microseconds (futex, ppoll).
inline timespec timespecOfUs(long us) { return timespec{us / 1000000, (us % 1000000) * 1000}; }

// Sleeps while `*word` is `seen`, at most `us` microseconds; a wake-up, a signal or a
// change of the word ends it early (the caller looks again either way).
inline void futexWait(const uint32_t* word, uint32_t seen, long us) {
  const timespec limit = timespecOfUs(us);
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &limit, nullptr, 0);
}

// Wakes every sleep on `word`.
inline void futexWake(const uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

// The low half of a 64-bit FIFO counter (little-endian): it changes with every step.
inline const uint32_t* lowWord(const uint64_t* counter) { return reinterpret_cast<const uint32_t*>(counter); }

// After a store to `counter`: wakes the sleeps on its low word, if `*sleepers` counts any.
// The full fence orders the store before the read of the count; a sleeper increments the
// count, fences, and only then takes its last look at the counter, so one of the two sees
// the other and no wake-up is lost.
inline void wakeSleepersOf(const uint64_t* counter, const uint32_t* sleepers) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(sleepers, __ATOMIC_RELAXED) != 0) futexWake(lowWord(counter));
}

}  // namespace chorus
