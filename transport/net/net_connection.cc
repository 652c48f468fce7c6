#include "transport/net/net_connection.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"
#include "core/futex.h"
#include "device/common/step_stamps.h"
#include "transport/set_up_wait.h"

namespace chorus {
namespace {

constexpr int kTag = 0;  // one stream of steps per comm: tags are not needed
// For awaitReady: a peer that never connects. 30 s, or CHORUS_BOOTSTRAP_TIMEOUT (how long
// set-up may wait for other ranks) where that is shorter.
double connectTimeoutSec() { return static_cast<double>(std::min(30, bootstrapTimeoutSeconds())); }
constexpr double kDrainTimeoutSec = 10;  // for the destructor: a peer that stopped receiving

// How long an end's record must stay the same before it is relayed: past a call's usual
// length, so that connections in use send no notes, and far below the second a stuck
// wait takes to look at it.
constexpr auto kRelayAfter = std::chrono::milliseconds(20);
// How often a sender looks for its receiver's notes (a recv() each time).
constexpr auto kTakeEvery = std::chrono::milliseconds(5);
// Of the proxy's passes that moved nothing on a connection, those that relay its records
// (with the proxy asleep, a pass every CHORUS_WAIT_SLEEP_US: 160 ms at the default).
constexpr uint64_t kRelayEveryIdlePasses = 16;

uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// CHORUS_NET_NOTE_LINK: a note link beside a net without notes (note_link.h).
bool noteLinkWanted() { return envInt("CHORUS_NET_NOTE_LINK", 1) != 0; }

// The memory order the records' seqlock needs (step_stamps.h), on the host.
struct HostOrder {
  static uint64_t loadRelaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  static uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static void storeRelaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
  static void storeRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  static void fenceAcquire() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
  static void fenceRelease() { __atomic_thread_fence(__ATOMIC_RELEASE); }
};
static_assert(sizeof(PeerCall) == kNetNoteBytes, "a record travels as one note");

}  // namespace

NetConnection::NetConnection(Net& net, const FifoLayout& layout, int peerRank, bool sending, const NetGpuSlots& gpu,
                             std::string* why)
    : net_(net),
      sending_(sending),
      peer_(peerRank),
      nSlots_(static_cast<uint64_t>(layout.nSlots)),
      stride_(FifoEnd::proxiedStride(layout)),
      bytes_(FifoEnd::proxiedBytes(layout)),
      gpu_(gpu),
      trace_(layout.nSlots) {
  // With the slots on the GPU, only the control block is host memory (a page of its own:
  // the CUDA executor registers it).
  const size_t hostBytes = gpu_.memory != nullptr ? sizeof(StepFifoControl) : bytes_;
  memory_ = std::aligned_alloc(fifoPageBytes(), roundUpToFifoPages(hostBytes));
  if (memory_ == nullptr) {
    if (why) *why = "out of host memory";
    return;
  }
  memset(memory_, 0, sizeof(StepFifoControl));  // counters start at 0; slots need no clearing
  ctrl_ = static_cast<StepFifoControl*>(memory_);
  if (gpu_.memory == nullptr) {
    buffer_ = static_cast<char*>(memory_) + sizeof(StepFifoControl);
    return;
  }
  std::string failure;
  buffer_ = static_cast<char*>(gpu_.memory->allocate(gpu_.device, stride_ * nSlots_, false, &failure));
  if (buffer_ == nullptr && why) *why = "GPU memory on CUDA device " + std::to_string(gpu_.device) + ": " + failure;
}

void NetConnection::attach(const FifoLayout& layout, FifoEnd* end) const {
  *end = FifoEnd{};
  end->attachProxiedApart(ctrl_, buffer_, layout);
  end->gpuBuffers = gpu_.memory != nullptr;
}

std::string NetConnection::describe() const {
  std::string text = noteLink_ != nullptr ? "calls relayed over a note link" : "";
  if (gpu_.memory == nullptr) return text;
  return (text.empty() ? text : text + ", ") + "GPUDirect RDMA: slots in CUDA device " + std::to_string(gpu_.device) +
         "'s memory" + (gpu_.dmaBuf ? ", registered by dma-buf" : "");
}

NetConnection::~NetConnection() {
  if (inProxy_) {
    drainSends();
    Proxy::instance().remove(this);
    INFO(kSubsysNet, "NET/%s : connection %s rank %d closed after %llu steps", net_.name(), sending_ ? "to" : "from",
         peer_, static_cast<unsigned long long>(done_));
  }
  closeComms();
  if (gpu_.memory != nullptr && buffer_ != nullptr) gpu_.memory->release(gpu_.device, buffer_);
  std::free(memory_);
}

size_t NetConnection::releaseIdleSlots() {
  // Every protocol publishes tail here. GPU slots stay: only host pages can be given back.
  if (!sending_ || memory_ == nullptr || gpu_.memory != nullptr || !simpleSlotsIdle(ctrl_)) return 0;
  return releaseFifoPages(memory_, sizeof(StepFifoControl), bytes_, false);
}

// A communicator destroyed right after its last call may still have steps in the local
// FIFO that the peer needs: they go out first (unless the connection broke).
void NetConnection::drainSends() {
  if (!sending_) return;
  const auto start = std::chrono::steady_clock::now();
  while (state_.load() == State::Ready && __atomic_load_n(&ctrl_->broken, __ATOMIC_ACQUIRE) == 0 &&
         loadAcquire(&ctrl_->head) != loadAcquire(&ctrl_->tail)) {
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(kDrainTimeoutSec)) {
      WARN("NET/%s : %llu steps to rank %d were still unsent %.0f s after the communicator was destroyed; dropped",
           net_.name(), static_cast<unsigned long long>(loadAcquire(&ctrl_->tail) - loadAcquire(&ctrl_->head)), peer_,
           kDrainTimeoutSec);
      return;
    }
    timespec nap{0, 100 * 1000};
    nanosleep(&nap, nullptr);
  }
}

ncclResult_t NetConnection::listen(int dev, void* handle, NoteLinkHandle* noteLink) {
  dev_ = dev;
  ncclResult_t r = net_.listen(dev, handle, &listenComm_);
  if (r != ncclSuccess) {
    WARN("NET/%s : listen() on device %d for the connection from rank %d failed: %s", net_.name(), dev, peer_,
         ncclGetErrorString(r));
    return r;
  }
  *noteLink = NoteLinkHandle{};
  // NoteLink::listen writes the handle only once it listens: a failure leaves magic 0 (none).
  if (!net_.supportsNotes() && noteLinkWanted() && NoteLink::listen(noteLink, &noteLink_) != ncclSuccess) {
    INFO(kSubsysNet, "NET/%s : no note link for the connection from rank %d: its calls will not be relayed",
         net_.name(), peer_);
  }
  return ncclSuccess;
}

void NetConnection::setPeerHandle(int dev, const void* handle, const NetCommConfig& config,
                                  const NoteLinkHandle& noteLink) {
  dev_ = dev;
  memcpy(handle_, handle, sizeof(handle_));
  config_ = config;
  peerNoteLink_ = noteLink;
}

bool NetConnection::traceProxyOp(const ProxyOpTrace& op) {
  if (state_.load() == State::Failed) return false;
  trace_.add(op);
  return true;
}

void NetConnection::stopTracing() {
  if (inProxy_) drainSends();
  trace_.stopAll();
}

void NetConnection::start() {
  inProxy_ = true;
  Proxy::instance().add(this);
}

bool NetConnection::progress() {
  if (busy_.exchange(true, std::memory_order_acquire)) return false;  // an executor drives it now
  const bool moved = progressExclusive();
  // Relaying is for connections that stand still (a wait that may never end): a pass that
  // moved nothing, and only every kRelayEveryIdlePasses of those, so that a busy proxy
  // spends nothing on it.
  if (!moved && notes_ && ++idlePasses_ % kRelayEveryIdlePasses == 0 &&
      state_.load(std::memory_order_relaxed) == State::Ready)
    relayCalls();
  busy_.store(false, std::memory_order_release);
  return moved;
}

bool NetConnection::drive(void* self) {
  auto* conn = static_cast<NetConnection*>(self);
  if (conn->busy_.exchange(true, std::memory_order_acquire)) return false;
  bool settled = false;
  if (conn->state_.load(std::memory_order_acquire) == State::Ready) {
    const uint64_t tail = loadAcquire(&conn->ctrl_->tail);
    int64_t unsent = 0;
    for (uint64_t s = conn->posted_; conn->sending_ && s < tail; ++s)
      unsent += conn->ctrl_->sizes[s & (conn->nSlots_ - 1)];
    // A receiver with no receive posted is not among what a sleeping proxy watches: the
    // one this drive posts must ring it, or a step arriving while no thread drives (the
    // one-sided service polls tail) would wait for the proxy's next round.
    const bool watched = conn->sending_ || conn->posted_ != conn->done_;
    if (unsent <= static_cast<int64_t>(FifoEnd::kDriveMaxBytes)) {
      conn->progressExclusive();
      settled = conn->state_.load(std::memory_order_relaxed) == State::Ready && watched &&
                (!conn->sending_ || conn->done_ == loadAcquire(&conn->ctrl_->tail));
    }
  }
  conn->busy_.store(false, std::memory_order_release);
  return settled;
}

bool NetConnection::progressExclusive() {
  switch (state_.load(std::memory_order_relaxed)) {
    case State::Connecting:
      return progressConnect();
    case State::Ready:
      if (__atomic_load_n(&ctrl_->broken, __ATOMIC_ACQUIRE) != 0) {
        // The local executor gave up: closing tells the peer's proxy, hence the peer.
        INFO(kSubsysNet, "NET/%s : closing the connection %s rank %d: this rank's work failed", net_.name(),
             sending_ ? "to" : "from", peer_);
        closeComms();
        state_.store(State::Failed);
        trace_.stopAll();
        return true;
      }
      return sending_ ? progressSend() : progressRecv();
    case State::Failed:
      return false;
  }
  return false;
}

bool NetConnection::progressConnect() {
  ncclResult_t r = ncclSuccess;
  if (sending_) {
    r = net_.connect(dev_, config_, handle_, &sendComm_);
    if (r != ncclSuccess) return fail("connect()", r), true;
    if (sendComm_ == nullptr) return false;
  } else {
    r = net_.accept(listenComm_, &recvComm_);
    if (r != ncclSuccess) return fail("accept()", r), true;
    if (recvComm_ == nullptr) return false;
    net_.closeListen(listenComm_);
    listenComm_ = nullptr;
  }
  r = registerSlots(sending_ ? static_cast<void*>(sendComm_) : static_cast<void*>(recvComm_));
  if (r != ncclSuccess) return fail(gpu_.memory != nullptr ? "registering the GPU slots" : "regMr()", r), true;
  // The sender takes the receiver's offer of a note link (it offers none over a net with notes).
  if (sending_ && peerNoteLink_.magic == kNoteLinkMagic && noteLinkWanted() &&
      NoteLink::connect(peerNoteLink_, config_.trafficClass, &noteLink_) != ncclSuccess) {
    INFO(kSubsysNet, "NET/%s : no note link for the connection to rank %d: its calls will not be relayed", net_.name(),
         peer_);
  }
  notes_ = net_.supportsNotes() || noteLink_ != nullptr;
  const std::string details = describe();
  INFO(kSubsysNet | kSubsysInit, "NET/%s : connection %s rank %d established (device %d%s%s)", net_.name(),
       sending_ ? "to" : "from", peer_, dev_, details.empty() ? "" : ", ", details.c_str());
  state_.store(State::Ready, std::memory_order_release);
  return true;
}

// Host slots as host memory; GPU slots through a dma-buf where the net takes one, else as
// CUDA memory (the NIC driver's peer memory module, nvidia-peermem).
ncclResult_t NetConnection::registerSlots(void* comm) {
  const size_t bytes = stride_ * nSlots_;
  if (gpu_.memory == nullptr) return net_.regMr(comm, buffer_, bytes, kNetPtrHost, &mhandle_);
  if (!gpu_.dmaBuf) return net_.regMr(comm, buffer_, bytes, kNetPtrCuda, &mhandle_);
  std::string why;
  uint64_t offset = 0;
  const int fd = gpu_.memory->dmaBufFd(gpu_.device, buffer_, bytes, &offset, &why);
  if (fd < 0) {
    INFO(kSubsysNet, "NET/%s : no dma-buf for the slots %s rank %d (%s): registering them as CUDA memory", net_.name(),
         sending_ ? "to" : "from", peer_, why.c_str());
    gpu_.dmaBuf = false;
    return net_.regMr(comm, buffer_, bytes, kNetPtrCuda, &mhandle_);
  }
  const ncclResult_t r = net_.regMrDmaBuf(comm, buffer_, bytes, kNetPtrCuda, offset, fd, &mhandle_);
  close(fd);  // the registration holds its own reference
  return r;
}

bool NetConnection::progressSend() {
  bool moved = false;
  const uint64_t tail = loadAcquire(&ctrl_->tail);
  while (posted_ < tail && posted_ - done_ < nSlots_) {
    const int64_t bytes = ctrl_->sizes[posted_ & (nSlots_ - 1)];
    NetRequest* request = nullptr;
    ncclResult_t r = net_.isend(sendComm_, slot(posted_), static_cast<int>(bytes), kTag, mhandle_, &request);
    if (r != ncclSuccess) return fail("isend()", r), true;
    if (request == nullptr) break;  // the net's request pool is full: later
    requests_[posted_ & (nSlots_ - 1)] = request;
    if (trace_.active()) trace_.onPosted(posted_, true, static_cast<size_t>(bytes));
    ++posted_;
    moved = true;
  }
  while (done_ < posted_) {
    int done = 0;
    ncclResult_t r = net_.test(requests_[done_ & (nSlots_ - 1)], &done, nullptr);
    if (r != ncclSuccess) return fail("test() of a send", r), true;
    if (!done) break;
    if (trace_.active()) trace_.onSent(done_);
    publish(&ctrl_->head, ++done_);
    moved = true;
  }
  return moved;
}

bool NetConnection::progressRecv() {
  bool moved = false;
  const uint64_t head = loadAcquire(&ctrl_->head);
  if (trace_.active()) trace_.onConsumed(head, ctrl_->sizes);  // before the freed slots take new receives
  while (posted_ - head < nSlots_ && posted_ - done_ < nSlots_) {
    void* data = slot(posted_);
    int size = static_cast<int>(stride_);
    int tag = kTag;
    NetRequest* request = nullptr;
    ncclResult_t r = net_.irecv(recvComm_, 1, &data, &size, &tag, &mhandle_, &request);
    if (r != ncclSuccess) return fail("irecv()", r), true;
    if (request == nullptr) break;
    requests_[posted_ & (nSlots_ - 1)] = request;
    if (trace_.active()) trace_.onPosted(posted_, false, 0);
    ++posted_;
    moved = true;
  }
  while (done_ < posted_) {
    int done = 0;
    int size = 0;
    ncclResult_t r = net_.test(requests_[done_ & (nSlots_ - 1)], &done, &size);
    if (r != ncclSuccess) return fail("test() of a receive", r), true;
    if (!done) break;
    // The NIC's writes into GPU memory may still be on their way when its completion is
    // seen: they are flushed before the kernel may read them.
    if (gpu_.memory != nullptr && gpu_.flush) {
      std::string why;
      if (!gpu_.memory->flushRdmaWrites(gpu_.device, &why)) {
        WARN("NET/%s : flushing the GPUDirect RDMA writes from rank %d to CUDA device %d failed: %s", net_.name(),
             peer_, gpu_.device, why.c_str());
        return fail("flushing GPUDirect RDMA writes", ncclUnhandledCudaError), true;
      }
    }
    ctrl_->sizes[done_ & (nSlots_ - 1)] = size;
    if (trace_.active()) trace_.onArrived(done_, static_cast<size_t>(size));  // before the executor can consume it
    publish(&ctrl_->tail, ++done_);
    moved = true;
  }
  return moved;
}

void NetConnection::relayCalls() {
  // The peer's record: a receiver's goes straight in; a sender's waits for its steps.
  if (holding_ && done_ >= heldAfter_) {
    stamp_detail::writePeerCall<HostOrder>(peerRecord(), held_.call, held_.endStep);
    holding_ = false;
  }
  void* comm = sending_ ? static_cast<void*>(sendComm_) : static_cast<void*>(recvComm_);
  const uint64_t generation = HostOrder::loadAcquire(&ownRecord()->generation);
  const bool pending = generation != sentGeneration_;
  const auto now = pending || sending_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  // A receiver's notes come in with its messages, so taking one costs no syscall; a sender
  // reads its receiver's from the socket, every kTakeEvery (over a note link, both read it).
  if (!holding_ && (!sending_ || now >= nextTake_)) {
    nextTake_ = now + kTakeEvery;
    holding_ = takeNote(comm, &held_, &heldAfter_);
  }
  if (!pending) return;
  if (generation != seenGeneration_) {
    seenGeneration_ = generation;
    seenAt_ = now;
  }
  if (now - seenAt_ < kRelayAfter) return;
  PeerCall own;
  if (!stamp_detail::readPeerCall<HostOrder>(ownRecord(), &own)) return;  // being rewritten: next time
  // A sender's record follows every step published before it (its executor publishes, then
  // announces): those must be handed to the net first, so the note travels behind them.
  if (sending_ && posted_ < loadAcquire(&ctrl_->tail)) return;
  if (!sendNote(comm, own)) return;
  sentGeneration_ = own.generation;
}

bool NetConnection::takeNote(void* comm, PeerCall* note, uint64_t* after) {
  if (noteLink_ != nullptr) return noteLink_->take(note, after);
  bool got = false;
  return net_.takeNote(comm, note, after, &got) == ncclSuccess && got;  // a failure: the data path reports it
}

bool NetConnection::sendNote(void* comm, const PeerCall& note) {
  // Over the link the note cannot travel behind the sender's messages: it says how many
  // there were (every published step has been handed to the net: relayCalls made sure).
  if (noteLink_ != nullptr) return noteLink_->send(&note, sending_ ? posted_ : 0), true;
  return net_.sendNote(comm, &note) == ncclSuccess;
}

void NetConnection::publish(uint64_t* counter, uint64_t value) {
  __atomic_store_n(counter, value, __ATOMIC_RELEASE);
  wakeSleepersOf(counter, &ctrl_->sleepers);
}

bool NetConnection::waitSet(std::vector<pollfd>* fds) {
  switch (state_.load(std::memory_order_relaxed)) {
    case State::Connecting:
      return false;  // connect() and accept() are polled
    case State::Failed:
      return true;  // nothing to wait for
    case State::Ready:
      break;
  }
  if (drivenByKernel_.load(std::memory_order_relaxed)) return false;
  // The comm's state is the driving thread's while it moves it: the proxy naps instead.
  if (busy_.exchange(true, std::memory_order_acquire)) return false;
  const bool said = net_.waitSet(sending_ ? static_cast<void*>(sendComm_) : static_cast<void*>(recvComm_), fds);
  busy_.store(false, std::memory_order_release);
  return said;
}

void NetConnection::announceSleep(uint32_t bell) {
  if (ctrl_ != nullptr) __atomic_store_n(&ctrl_->proxyAsleep, bell, __ATOMIC_SEQ_CST);
}

void NetConnection::fail(const char* call, ncclResult_t result) {
  // INFO only: a peer that destroys its communicator closes its end too. The executor
  // that waits on this connection is the one that WARNs, naming the peer.
  INFO(kSubsysNet, "NET/%s : %s on the connection %s rank %d failed (%s) after %llu steps; connection closed",
       net_.name(), call, sending_ ? "to" : "from", peer_, ncclGetErrorString(result),
       static_cast<unsigned long long>(done_));
  __atomic_store_n(&ctrl_->broken, static_cast<uint32_t>(kBrokenNet), __ATOMIC_RELEASE);
  // An executor asleep on either counter looks at `broken` once woken.
  wakeSleepersOf(&ctrl_->head, &ctrl_->sleepers);
  wakeSleepersOf(&ctrl_->tail, &ctrl_->sleepers);
  closeComms();
  state_.store(State::Failed);
  trace_.stopAll();
}

void NetConnection::closeComms() {
  // Broken (this rank failed or aborted, or the net failed): what is still undelivered is
  // not needed, so the close need not wait for it.
  if (sendComm_ != nullptr && ctrl_ != nullptr && __atomic_load_n(&ctrl_->broken, __ATOMIC_ACQUIRE) != 0)
    net_.abandonSend(sendComm_);
  if (mhandle_ != nullptr) {
    net_.deregMr(sendComm_ ? static_cast<void*>(sendComm_) : static_cast<void*>(recvComm_), mhandle_);
    mhandle_ = nullptr;
  }
  noteLink_.reset();  // the peer's link sees it close and goes quiet
  if (sendComm_ != nullptr) net_.closeSend(sendComm_);
  if (recvComm_ != nullptr) net_.closeRecv(recvComm_);
  if (listenComm_ != nullptr) net_.closeListen(listenComm_);
  sendComm_ = nullptr;
  recvComm_ = nullptr;
  listenComm_ = nullptr;
}

ncclResult_t NetConnection::awaitReady(FifoEnd* /*end*/, const std::atomic<uint32_t>* abortFlag,
                                       const std::atomic<uint32_t>* revokeFlag) {
  const double limit = connectTimeoutSec();
  const SetUpWaitEnd waited = awaitSetUp(
      [&] {
        const State state = state_.load(std::memory_order_acquire);
        if (state == State::Ready) return SetUpPoll::kDone;
        return state == State::Failed ? SetUpPoll::kFailed : SetUpPoll::kWaiting;
      },
      abortFlag, revokeFlag, limit);
  switch (waited) {
    case SetUpWaitEnd::kDone:
      return ncclSuccess;
    case SetUpWaitEnd::kFailed:
      WARN(
          "NET/%s : the connection %s rank %d could not be established (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=NET "
          "shows why)",
          net_.name(), sending_ ? "to" : "from", peer_);
      return ncclRemoteError;
    case SetUpWaitEnd::kAborted:
      return ncclSystemError;
    case SetUpWaitEnd::kRevoked:
      WARN("NET/%s : the communicator was revoked while the connection %s rank %d was being established", net_.name(),
           sending_ ? "to" : "from", peer_);
      return ncclSystemError;
    case SetUpWaitEnd::kTimedOut:
      WARN("NET/%s : the connection %s rank %d was not established within %.0f s", net_.name(),
           sending_ ? "to" : "from", peer_, limit);
      return ncclRemoteError;
  }
  return ncclInternalError;
}

}  // namespace chorus
