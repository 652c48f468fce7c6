#include "device/cpu/cpu_exec.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "core/debug.h"
#include "core/env.h"
#include "core/process_liveness.h"
#include "device/common/step_stamps.h"
#include "device/cpu/call_description.h"
#include "device/cpu/fiber_scheduler.h"

namespace chorus {
namespace {

double nowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// What a wait that will not end waits for, and where the peer is, as a WARN says it:
// "AllReduce(...) #4812 waits for step 3 from peer rank 3; rank 3 is at AllReduce(...) #4811
// (finished): it has not reached #4812".
std::string describeWait(const FifoEnd& end) {
  char text[512];
  const std::string mine = end.call.seq != 0 ? describeCall(end.call) : std::string("the call");
  // A sender with a slot free waits for no slot: it is a Send in place waiting for its
  // receiver to enter the call (SimplePrimitives::takeOffer).
  const bool slotFree =
      end.step - __atomic_load_n(&end.ctrl->head, __ATOMIC_ACQUIRE) < static_cast<uint64_t>(end.nSlots);
  if (end.sending && slotFree) {
    snprintf(text, sizeof(text), "%s waits for peer rank %d to enter its receive (a send in place writes into it)",
             mine.c_str(), end.peer);
  } else if (end.sending) {
    snprintf(text, sizeof(text), "%s waits for peer rank %d to free a slot for step %llu", mine.c_str(), end.peer,
             static_cast<unsigned long long>(end.step));
  } else {
    snprintf(text, sizeof(text), "%s waits for step %llu from peer rank %d", mine.c_str(),
             static_cast<unsigned long long>(end.step), end.peer);
  }
  std::string out = text;
  PeerCall at;
  const PeerCall* record = end.sending ? &end.ctrl->receiver : &end.ctrl->sender;
  if (!stamp_detail::readPeerCall<CpuExec>(record, &at)) {
    // Over the network the peer's record comes relayed, once it has stood still a moment.
    if (end.proxied) return out + " (over the network: where that rank is, its own report says)";
    snprintf(text, sizeof(text), "; rank %d has not called anything on this connection yet", end.peer);
    return out + text;
  }
  const char* state = at.endStep != 0 ? "finished" : "in progress";
  if (!sameNumbering(at.call, end.call)) {
    snprintf(text, sizeof(text), "; rank %d is in %s (%s) of another communicator sharing this connection", end.peer,
             describeCall(at.call).c_str(), state);
  } else if (end.call.seq != 0 && at.call.seq < end.call.seq) {
    snprintf(text, sizeof(text), "; rank %d is at %s (%s): it has not reached #%llu", end.peer,
             describeCall(at.call).c_str(), state, static_cast<unsigned long long>(callNumber(end.call.seq)));
  } else {
    snprintf(text, sizeof(text), "; rank %d is in %s (%s)", end.peer, describeCall(at.call).c_str(), state);
  }
  return out + text;
}

constexpr uint64_t kYieldRounds = 2048;
constexpr uint64_t kProxiedYieldRounds = 128;
// With sleeping on: how long a wait on a direct FIFO yields before it sleeps (after its
// spin and 64 yields). A sleep and its wake-up cost microseconds; past this the peer is
// busy with something long (a model's backward pass, a slow rank). A wait on a proxied
// FIFO sleeps at once: the network takes tens of microseconds at best, and its proxy
// thread needs the core meanwhile.
constexpr double kSleepAfterSec = 200e-6;

}  // namespace

double CpuExec::monotonicSec() { return nowSec(); }
void CpuExec::yieldToOtherLanes() { FiberScheduler::yield(); }

void ExecContext::configure(const std::atomic<uint32_t>* abort, const std::atomic<uint32_t>* revoke, int ofRank,
                            double timeout, int localRanks) {
  abortFlag = abort;
  revokeFlag = revoke;
  rank = ofRank;
  timeoutSec = timeout;
  const bool oversubscribed = localRanks > sysconf(_SC_NPROCESSORS_ONLN);
  spins = oversubscribed ? kOversubscribedSpins : kDefaultSpins;
  driveUs = oversubscribed ? 0 : kDefaultDriveUs;
  sleepMaxUs = envIntInRange("CHORUS_WAIT_SLEEP_US", 10000, 0, INT64_MAX);
}

void CpuExec::announceSleep(const FifoEnd& end, int delta) {
  __atomic_fetch_add(&end.ctrl->sleepers, static_cast<uint32_t>(delta), __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // before the caller's last look at the counter
}

void CpuExec::sleepOn(const FifoEnd& end, uint32_t seen, long us) { futexWait(counterWord(end), seen, us); }

void CpuExec::ringProxy(uint32_t bell) { eventfd_write(static_cast<int>(bell - 1), 1); }

CpuExec::Wait CpuExec::keepWaiting(const FifoEnd& end, WaitState* state) {
  ++state->rounds;
  // Other lanes of this thread first: they may be what this wait is waiting for.
  const bool yieldedToLane = FiberScheduler::yield();
  if (state->rounds < 64) {
    if (!yieldedToLane) sched_yield();
    return Wait::kGoOn;
  }
  const double now = nowSec();
  const bool starting = state->start == 0;
  if (starting) {
    state->start = now;
    state->nextCheck = now + 1.0;
  }
  // A sleeping wait checks at every round: each may have lasted up to sleepMaxUs.
  const bool sleeps = ctx_.sleepMaxUs > 0 && (end.proxied || now - state->start >= kSleepAfterSec);
  if ((state->rounds & 15) == 0 || starting || sleeps) {
    const bool aborted = ctx_.abortFlag && ctx_.abortFlag->load(std::memory_order_relaxed);
    if (aborted || (ctx_.revokeFlag && ctx_.revokeFlag->load(std::memory_order_relaxed))) {
      const bool first = !ctx_.failed();
      if (first)
        WARN("Rank %d: the communicator was %s while this call waited for peer rank %d; its buffers are incomplete",
             ctx_.rank, aborted ? "aborted (ncclCommAbort)" : "revoked (ncclCommRevoke or NCCL_SHRINK_ABORT)",
             end.peer);
      ctx_.setError(ncclSystemError);
      if (first && now - state->start > 1.0)
        reportStuck(end, aborted ? "a stuck call was aborted" : "a stuck call was revoked");
      return Wait::kStop;
    }
    if (ctx_.failed()) return Wait::kStop;  // another lane already failed: stop this one too
    if (__atomic_load_n(&end.ctrl->broken, __ATOMIC_ACQUIRE) != 0) return Wait::kBroken;
    if (CallStamp theirs; callConflict<CpuExec>(end, &theirs)) {
      mismatch(end, theirs, end.call, "it went past this call without what this rank waits for");
      return Wait::kStop;
    }
    if (now >= state->nextCheck) {
      state->nextCheck = now + 1.0;
      if (!peerAlive(end.peerAlive, end.peerProcessId)) return Wait::kPeerExited;
      if (ctx_.timeoutSec > 0 && now - state->start > ctx_.timeoutSec) {
        WARN("Rank %d: timed out: no progress from peer rank %d for %.0f s (CHORUS_TIMEOUT): %s; giving up", ctx_.rank,
             end.peer, ctx_.timeoutSec, describeWait(end).c_str());
        ctx_.setError(ncclRemoteError);  // the peer stalled, as NCCL reports a remote failure
        reportStuck(end, "a call timed out (CHORUS_TIMEOUT)");
        return Wait::kStop;
      }
    }
  }
  if (yieldedToLane) {
    // The thread's other lanes wait on other counters, whose publishes do not wake this
    // sleep. So it sleeps only once none of them has ended a wait for 64 rounds (they
    // all wait), and briefly: a tenth of the time waited so far (50 µs to 1 ms), so a
    // long idle wait costs little CPU and the others' progress little delay.
    if ((state->rounds & 63) != 0) return Wait::kGoOn;
    const bool othersIdle = state->waitsEndedAt == tWaitsEnded;
    state->waitsEndedAt = tWaitsEnded;
    if (!sleeps || !othersIdle) {
      sched_yield();
      return Wait::kGoOn;
    }
    state->sleepUs = std::clamp(static_cast<long>((now - state->start) * 1e5), 50L, std::min(1000L, ctx_.sleepMaxUs));
    return Wait::kSleep;
  }
  if (sleeps) {
    state->sleepUs = ctx_.sleepMaxUs;
    return Wait::kSleep;
  }
  // Sleeping is off (CHORUS_WAIT_SLEEP_US=0). A proxied end waits for the network, and
  // its proxy thread needs the core meanwhile: nap much sooner than for a direct peer.
  if (state->rounds < (end.proxied ? kProxiedYieldRounds : kYieldRounds)) {
    sched_yield();
  } else {
    // Long waits (a slow peer, a stalled process): nap so the core goes to ranks with work.
    timespec nap{0, 50 * 1000};
    nanosleep(&nap, nullptr);
  }
  return Wait::kGoOn;
}

void CpuExec::reportGone(const FifoEnd& end, Wait why) {
  if (why == Wait::kPeerExited) {
    WARN("Rank %d: peer rank %d (pid %d) has exited while this rank waited for it", ctx_.rank, end.peer, end.peerPid);
    ctx_.setError(ncclRemoteError);
    return;
  }
  const uint32_t cause = __atomic_load_n(&end.ctrl->broken, __ATOMIC_ACQUIRE);
  if (cause == kBrokenByDestroy) {
    WARN(
        "Rank %d: peer rank %d destroyed its communicator (ncclCommDestroy) without making this call: it cannot "
        "complete",
        ctx_.rank, end.peer);
    ctx_.setError(ncclRemoteError);
    return;
  }
  if (cause == kBrokenByMismatch) {
    WARN("Rank %d: peer rank %d found that the ranks' calls do not match (its WARN names both); this call failed",
         ctx_.rank, end.peer);
    ctx_.setError(ncclInvalidUsage);
    return;
  }
  WARN("Rank %d: the connection with peer rank %d is broken: %s", ctx_.rank, end.peer,
       cause == kBrokenByPeer
           ? "that rank's work failed or it aborted"
           : "the network connection failed or the peer closed it (it exited, was killed, or destroyed "
             "its communicator)");
  ctx_.setError(ncclRemoteError);
}

void CpuExec::reportStuck(const FifoEnd& end, const char* why) {
  if (ctx_.reportStuck && !ctx_.stuckReported.exchange(true)) ctx_.reportStuck(why, describeWait(end));
}

void CpuExec::mismatch(const FifoEnd& end, const CallStamp& theirs, const CallStamp& mine, const char* why) {
  // Another numbering: a call of another communicator that shares the connection, which
  // every rank must run in the same order relative to this communicator's.
  const char* whose = sameNumbering(theirs, mine) ? "" : " of another communicator sharing this connection";
  if (!ctx_.failed())
    WARN(
        "Rank %d: calls do not match: rank %d called %s%s, rank %d called %s (%s); the communicator cannot be used "
        "any more",
        ctx_.rank, end.peer, describeCall(theirs).c_str(), whose, ctx_.rank, describeCall(mine).c_str(), why);
  ctx_.setError(ncclInvalidUsage);
}

void CpuExec::staleRingSteps(int sender, int receiver, uint64_t sent, uint64_t received, const CallStamp& mine) {
  if (!ctx_.failed())
    WARN(
        "Rank %d: calls do not match: before %s, rank %d sent %llu steps on the ring to rank %d, which received %llu "
        "of them: an earlier call ran on one side only (a Broadcast called with two roots?); the communicator cannot "
        "be used any more",
        ctx_.rank, describeCall(mine).c_str(), sender, static_cast<unsigned long long>(sent), receiver,
        static_cast<unsigned long long>(received));
  ctx_.setError(ncclInvalidUsage);
}

void CpuExec::fail(const FifoEnd& end, const char* what, long got, long expected) {
  WARN("Rank %d: %s: peer rank %d sent %ld bytes, %ld expected", ctx_.rank, what, end.peer, got, expected);
  ctx_.setError(ncclInvalidUsage);
}

}  // namespace chorus
