#include "src/rma/rma_service.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/debug.h"
#include "core/process_liveness.h"
#include "core/thread_name.h"
#include "device/cpu/cpu_exec.h"
#include "src/comm/connect.h"
#include "src/rma/rma_wire.h"

namespace chorus {
namespace {

constexpr int kRmaTag = 0x4000;  // bootstrap tag of the one-sided connections' handles
constexpr Protocol kSimple = Protocol::Simple;

// The one-sided connections carry Simple steps only, as large as the send/recv ones.
FifoLayout rmaLayout(const ncclComm* comm) {
  FifoLayout layout = comm->p2pLayout;
  layout.slotBytes[static_cast<int>(Protocol::LL)] = 0;
  layout.slotBytes[static_cast<int>(Protocol::LL128)] = 0;
  return layout;
}

// Naps of the service thread once nothing has arrived for a while: short at first, so a
// burst of puts is served at once, long once the communicator has been quiet.
void idle(uint64_t rounds) {
  if (rounds < 64) {
    __builtin_ia32_pause();
  } else if (rounds < 1024) {
    sched_yield();
  } else {
    timespec nap{0, rounds < 20000 ? 50 * 1000 : 1000 * 1000};
    nanosleep(&nap, nullptr);
  }
}

// Connects this rank to every peer both ways for one-sided calls: every receiver first,
// its handle sent, then every sender (src/comm/connect.h says why in that order).
ncclResult_t connectRmaPeers(ncclComm* comm) {
  const FifoLayout layout = rmaLayout(comm);
  for (int peer = 0; peer < comm->nranks; ++peer)
    if (peer != comm->rank)
      CHORUS_CHECK(createReceiverFor(comm, peer, layout, kRmaTag, &comm->rmaRecv[peer], ConnectionUse::kOneSided));
  for (int peer = 0; peer < comm->nranks; ++peer) {
    if (peer == comm->rank) continue;
    CHORUS_CHECK(attachSenderTo(comm, peer, kRmaTag, &comm->rmaSend[peer], ConnectionUse::kOneSided));
    INFO(kSubsysP2p, "One-sided: %d[%d] -> %d[%d] via %s", comm->rank, comm->cudaDev, peer, comm->peers[peer].cudaDev,
         comm->rmaSend[peer].transport->name());
  }
  return awaitConnections(comm);
}

// What each rank tells the others about a window it registers.
struct WindowRecord {
  uint64_t seq;
  uint64_t size;
  uint32_t hostMemory;
  uint32_t pad;
};

}  // namespace

ncclResult_t shareWindow(ncclComm* comm, ncclWindow_vidmem* win) {
  std::vector<WindowRecord> records(comm->nranks);
  records[comm->rank] = WindowRecord{win->seq, win->size, win->hostMemory ? 1u : 0u, 0};
  CHORUS_CHECK(comm->bootstrap->allGather(records.data(), sizeof(WindowRecord)));
  for (int r = 0; r < comm->nranks; ++r) {
    if (records[r].seq == win->seq) continue;
    WARN(
        "ncclCommWindowRegister: rank %d registered its window number %llu on this communicator while this rank "
        "registered number %llu: every rank must register the same windows in the same order",
        r, static_cast<unsigned long long>(records[r].seq), static_cast<unsigned long long>(win->seq));
    return ncclInvalidUsage;
  }
  win->peers.resize(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) win->peers[r] = WindowPeer{records[r].size, records[r].hostMemory != 0};
  if (!comm->rma) {
    if (comm->nranks > 1) CHORUS_CHECK(connectRmaPeers(comm));
    comm->rma = std::make_unique<RmaService>(comm);
  }
  win->shared.store(true, std::memory_order_release);
  return ncclSuccess;
}

RmaService::RmaService(ncclComm* comm)
    : comm_(comm),
      received_(comm->nranks, 0),
      consumed_(comm->nranks, 0),
      failed_(comm->nranks),
      sendWaits_(std::make_unique<ExecContext>()) {
  sendWaits_->configure(&comm->abortFlag, &comm->revokeFlag, comm->rank, comm->timeoutSec, comm->localRanks);
  sendWaits_->commName = comm->config.commName;
  if (comm->nranks > 1) thread_ = std::thread([this] { serve(); });
}

RmaService::~RmaService() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void RmaService::serve() {
  nameThisThread("NCCL RMA");
  const ScopedLogContext logAs(comm_->rank, comm_->config.commName);
  uint64_t idleRounds = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    bool any = false;
    for (int peer = 0; peer < comm_->nranks; ++peer)
      if (peer != comm_->rank) any = drain(peer) || any;
    idleRounds = any ? 0 : idleRounds + 1;
    if (!any) idle(idleRounds);
  }
}

bool RmaService::drain(int peer) {
  FifoEnd& end = comm_->rmaRecv[peer].end;
  bool any = false;
  // A few steps per visit, so one busy sender does not starve the others.
  for (int n = 0; n < end.nSlots; ++n) {
    const uint64_t tail = CpuExec::loadAcquire(&end.ctrl->tail);
    if (static_cast<int64_t>(tail - end.step) <= 0) break;
    const int64_t bytes = end.ctrl->sizes[end.step & static_cast<uint64_t>(end.nSlots - 1)];
    if (!land(peer, end.slot(kSimple, end.step), bytes)) {
      // The sender's puts after this one would land on top of garbage: stop taking them.
      markBroken(end.ctrl, kBrokenByPeer);
      return any;
    }
    publishCounter<CpuExec>(end, &end.ctrl->head, ++end.step);  // wakes a put waiting for a free slot
    any = true;
  }
  return any;
}

bool RmaService::land(int peer, const char* step, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_[peer].empty()) return false;
  }
  const size_t slotBytes = comm_->rmaRecv[peer].end.slotBytes[static_cast<int>(kSimple)];
  RmaStepHeader h;
  if (bytes < static_cast<int64_t>(sizeof(h)) || static_cast<size_t>(bytes) > slotBytes) {
    failPeer(peer, "a one-sided step of " + std::to_string(bytes) + " bytes arrived (a slot holds " +
                       std::to_string(slotBytes) + ")");
    return false;
  }
  std::memcpy(&h, step, sizeof(h));
  if (h.magic != kRmaStepMagic || h.payloadBytes != static_cast<uint64_t>(bytes) - sizeof(h) ||
      ((h.flags & kRmaPut) == 0 && h.payloadBytes != 0)) {
    failPeer(peer, "a malformed one-sided step arrived (magic " + std::to_string(h.magic) + ", " +
                       std::to_string(h.payloadBytes) + " payload bytes in a step of " + std::to_string(bytes) + ")");
    return false;
  }
  if (h.flags & kRmaPut) {
    if (const std::string why = landPayload(h.windowSeq, h.offset, step + sizeof(h), h.payloadBytes); !why.empty()) {
      failPeer(peer, why);
      return false;
    }
  }
  if (h.flags & kRmaSignal) countSignal(peer);
  return true;
}

std::string RmaService::landPayload(uint64_t seq, uint64_t offset, const void* src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(comm_->regMutex);
  auto it = std::find_if(comm_->windows.begin(), comm_->windows.end(), [seq](const auto& w) { return w->seq == seq; });
  if (it == comm_->windows.end())
    return "a put arrived for window number " + std::to_string(seq) +
           ", which this rank has not registered (or has deregistered)";
  const ncclWindow_vidmem& w = **it;
  if (offset > w.size || bytes > w.size - offset)
    return "a put of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
           " arrived for a window of " + std::to_string(w.size) + " bytes";
  if (bytes > 0) std::memmove(static_cast<char*>(w.base) + offset, src, bytes);
  return "";
}

void RmaService::countSignal(int peer) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++received_[peer];
  }
  signalled_.notify_all();
}

void RmaService::failPeer(int peer, const std::string& why) {
  WARN("Rank %d: one-sided calls from peer rank %d: %s; waits for its signals fail from now on", comm_->rank, peer,
       why.c_str());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_[peer] = why;
  }
  signalled_.notify_all();
}

std::string RmaService::peerTrouble(int peer) {
  if (peer == comm_->rank) return "";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_[peer].empty()) return failed_[peer];
  }
  const FifoEnd& end = comm_->rmaRecv[peer].end;
  if (__atomic_load_n(&end.ctrl->broken, __ATOMIC_ACQUIRE) != 0)
    return "the connection from that rank is broken (its work failed, it aborted, or the network failed)";
  if (!peerAlive(end.peerAlive, end.peerProcessId))
    return "that rank's process (pid " + std::to_string(end.peerPid) + ") has exited";
  return "";
}

ncclResult_t RmaService::put(int peer, const std::optional<RmaData>& data, bool signal) {
  if (peer == comm_->rank) {  // to this rank's own window: a copy, then the signal
    if (data) {
      if (const std::string why = landPayload(data->windowSeq, data->offset, data->src, data->bytes); !why.empty()) {
        WARN("Rank %d: a put to itself cannot land: %s", comm_->rank, why.c_str());
        return ncclInvalidUsage;
      }
    }
    if (signal) countSignal(peer);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(sendMutex_);
  ExecContext& ctx = *sendWaits_;
  CpuExec exec(ctx);
  FifoEnd& end = comm_->rmaSend[peer].end;
  const size_t maxPayload = end.slotBytes[static_cast<int>(kSimple)] - sizeof(RmaStepHeader);
  const size_t bytes = data ? data->bytes : 0;
  size_t done = 0;
  do {  // at least one step: a signal without data, or a put of 0 bytes, is one step too
    const size_t chunk = std::min(bytes - done, maxPayload);
    if (!acquireSlot(exec, end)) return static_cast<ncclResult_t>(ctx.result.load());
    char* slot = end.slot(kSimple, end.step);
    const bool last = done + chunk == bytes;
    const RmaStepHeader h{kRmaStepMagic,
                          (data ? kRmaPut : 0u) | (last && signal ? kRmaSignal : 0u),
                          data ? data->windowSeq : 0,
                          data ? data->offset + done : 0,
                          chunk,
                          0,
                          0,
                          {0, 0, 0}};
    std::memcpy(slot, &h, sizeof(h));
    if (chunk > 0) std::memcpy(slot + sizeof(h), static_cast<const char*>(data->src) + done, chunk);
    end.ctrl->sizes[end.step & static_cast<uint64_t>(end.nSlots - 1)] = static_cast<int64_t>(sizeof(h) + chunk);
    publishCounter<CpuExec>(end, &end.ctrl->tail, ++end.step);
    done += chunk;
  } while (done < bytes);
  return ncclSuccess;
}

ncclResult_t RmaService::waitSignals(std::span<const ncclWaitSignalDesc_t> descs) {
  // What each peer must have sent beyond what earlier waits consumed (a peer may appear
  // in several descriptors).
  std::vector<uint64_t> need(comm_->nranks, 0);
  for (const ncclWaitSignalDesc_t& d : descs) need[d.peer] += static_cast<uint64_t>(d.opCnt);
  const auto start = std::chrono::steady_clock::now();
  auto nextCheck = start;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    int missing = -1;
    for (int p = 0; p < comm_->nranks && missing < 0; ++p)
      if (received_[p] - consumed_[p] < need[p]) missing = p;
    if (missing < 0) break;
    const bool aborted = comm_->abortFlag.load() != 0;
    if (aborted || comm_->revokeFlag.load() != 0) {
      WARN("Rank %d: the communicator was %s while ncclWaitSignal waited for peer rank %d", comm_->rank,
           aborted ? "aborted (ncclCommAbort)" : "revoked (ncclCommRevoke or NCCL_SHRINK_ABORT)", missing);
      return ncclSystemError;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= nextCheck) {
      nextCheck = now + std::chrono::seconds(1);
      lock.unlock();
      const std::string trouble = peerTrouble(missing);
      lock.lock();
      if (received_[missing] - consumed_[missing] >= need[missing]) continue;  // it came meanwhile
      if (!trouble.empty()) {
        WARN("Rank %d: ncclWaitSignal waits for %llu signals from peer rank %d, %llu have arrived: %s", comm_->rank,
             static_cast<unsigned long long>(need[missing]), missing,
             static_cast<unsigned long long>(received_[missing] - consumed_[missing]), trouble.c_str());
        return ncclRemoteError;
      }
      const double waited = std::chrono::duration<double>(now - start).count();
      if (comm_->timeoutSec > 0 && waited > comm_->timeoutSec) {
        WARN(
            "Rank %d: ncclWaitSignal: no signal from peer rank %d for %.0f s (CHORUS_TIMEOUT): %llu waited for, "
            "%llu arrived; giving up",
            comm_->rank, missing, comm_->timeoutSec, static_cast<unsigned long long>(need[missing]),
            static_cast<unsigned long long>(received_[missing] - consumed_[missing]));
        return ncclRemoteError;
      }
    }
    // Short slices: an abort must end the wait within milliseconds (ncclComm::haltWork).
    signalled_.wait_for(lock, std::chrono::milliseconds(10));
  }
  for (int p = 0; p < comm_->nranks; ++p) consumed_[p] += need[p];
  return ncclSuccess;
}

}  // namespace chorus
