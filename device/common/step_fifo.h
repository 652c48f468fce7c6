// StepFifo: the connector between a sender and a receiver, as both executors see it.
//
// The receiver owns `nSlots` slots per protocol (Simple, LL, LL128), each protocol in
// its own buffer. Two 64-bit counters that never wrap in practice order the hand-off:
//   tail — steps produced, written by the sender after the slot's data (release),
//          read by the receiver (acquire) before it reads the slot (Simple only:
//          LL and LL128 carry their completion flag inside the data, and publish tail
//          only so that a long wait can tell a step was sent, call_stamp.h);
//   head — steps consumed, written by the receiver once it is done with a slot,
//          read by the sender before it overwrites that slot (every protocol).
// The sender may fill step s once s - head < nSlots; the receiver may read step s
// once tail - s > 0 (differences, so even a wrap of the counters is harmless).
// Step s of any protocol uses slot s % nSlots of that protocol's buffer; both sides
// run the same sequence of calls, so they agree on every step's protocol and size.
// Each step is stamped with the call it belongs to and its bytes (call_stamp.h), so a
// receiver detects a mismatched call or count instead of reading garbage.
// Where this block and the buffers live (heap, POSIX shared memory, pinned or GPU
// memory) is the transport's business; the algorithms only see a FifoEnd.
// After publishing tail or head, a side calls Exec::wakeSleepers: a CPU wait that outlasts
// its spin sleeps in the kernel on that counter (`sleepers` says so) until it moves.
// `broken` is set by either side (or a proxy) once the connection cannot be trusted: a
// rank whose work failed, a network error. A waiting peer notices it and fails too, so
// one rank's failure reaches every rank instead of leaving them to their timeouts.
// A proxied FIFO (the NET transport) has a proxy thread at each end moving slots over
// the network instead of a peer in shared memory. The proxy cannot tell which protocol
// a step will use before it arrives, so there every protocol's step s shares one slot
// (stride: the largest protocol's slot and the stamp trailer), every sender publishes
// `sizes[s % nSlots]` (the bytes to send, trailer included) and tail, and LL and LL128
// receivers wait for tail before reading the lines. A proxy with nothing to move sleeps in
// poll() and says so in `proxyAsleep`: the executor's publishes then ring its doorbell.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/call_stamp.h"
#include "device/common/platform.h"

namespace chorus {

// NCCL's numbering (NCCL_PROTO_LL 0, NCCL_PROTO_LL128 1, NCCL_PROTO_SIMPLE 2).
enum class Protocol : int { LL = 0, LL128 = 1, Simple = 2 };
constexpr int kNumProtocols = 3;
// NCCL's numbering (NCCL_ALGO_TREE 0, NCCL_ALGO_RING 1).
enum class Algorithm : int { Tree = 0, Ring = 1 };
constexpr int kNumAlgorithms = 2;

// NCCL's names: "Tree", "Ring"; "LL", "LL128", "Simple" (host side: logs and messages).
inline const char* algorithmName(Algorithm algo) { return algo == Algorithm::Tree ? "Tree" : "Ring"; }
inline const char* protocolName(Protocol proto) {
  return proto == Protocol::LL ? "LL" : proto == Protocol::LL128 ? "LL128" : "Simple";
}

constexpr int kNcclSteps = 8;       // default slots per connection, as NCCL_STEPS
constexpr int kMaxSteps = 16;       // slot counts are powers of two up to this
constexpr size_t kCacheLine = 128;  // keeps the two counters on separate lines (also on GPUs)

// Why a connection broke, as stored in StepFifoControl::broken (0: it did not).
enum BrokenCause : uint32_t {
  kBrokenByPeer = 1,      // the rank at the other end failed or aborted and said so
  kBrokenNet = 2,         // the network connection failed or was closed by the peer
  kBrokenByMismatch = 3,  // the rank at the other end found the ranks' calls mismatched
  kBrokenByDestroy = 4,   // the rank at the other end destroyed its communicator: no call of it will come
};

// One step's stamp on a direct FIFO, on a cache line of its own (call_stamp.h).
struct alignas(64) StampSlot {
  StepStamp stamp;
};

struct StepFifoControl {
  alignas(kCacheLine) uint64_t tail;
  alignas(kCacheLine) uint64_t head;
  alignas(kCacheLine) int64_t sizes[kMaxSteps];  // proxied FIFOs: each step's bytes on the wire
  alignas(kCacheLine) uint32_t broken;           // nonzero: give up on this connection
  // CPU executor: how many waits sleep in the kernel on tail or head (a futex on the
  // counter's low word). Whoever publishes either counter wakes them (Exec::wakeSleepers)
  // if this is nonzero; it shares the line of `broken`, which is rarely written.
  uint32_t sleepers;
  // Proxied FIFOs: while the process's proxy sleeps (transport/net/proxy.h), its doorbell
  // (an eventfd) + 1, which the CPU executor's publishes ring; otherwise 0.
  uint32_t proxyAsleep;
  alignas(kCacheLine) StampSlot stamps[kMaxSteps];  // direct FIFOs: what each step belongs to
  // The call each end is in (call_stamp.h). Proxied FIFOs: each end writes its own into its
  // rank's FIFO, and the proxies relay it into the other rank's (net_connection.h).
  alignas(kCacheLine) PeerCall sender;
  alignas(kCacheLine) PeerCall receiver;
  // Direct FIFOs (FifoEnd::direct): the buffer a receiver offers the sender for its
  // Send/Recv call number `offerSeq`, written before it announces the call in `receiver`.
  alignas(kCacheLine) uint64_t offerSeq;
  uint64_t offered;
};

static_assert(sizeof(StepFifoControl) % 128 == 0, "the buffers after the control block start 128-byte aligned");

// Marks a connection broken for `cause` (host side), unless it already is: the first cause stays.
inline void markBroken(StepFifoControl* ctrl, BrokenCause cause) {
  uint32_t expected = 0;
  __atomic_compare_exchange_n(&ctrl->broken, &expected, static_cast<uint32_t>(cause), false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

// How a connection's memory is laid out: the control block, then one buffer per protocol.
// A slot holds whole lines of its protocol (LL's 16-byte lines, LL128's 128-byte lines,
// Simple's 64-byte vectors), and no slot is larger than kMaxSlotBytes.
constexpr size_t kSlotLineBytes[kNumProtocols] = {16, 128, 64};
// A FIFO's slot count (NCCL_STEPS): a power of two from 2 to kMaxSteps.
constexpr bool validSlotCount(int64_t n) { return n >= 2 && n <= kMaxSteps && (n & (n - 1)) == 0; }
constexpr size_t kMaxSlotBytes = size_t{1} << 30;

struct FifoLayout {
  int nSlots = kNcclSteps;
  int32_t unused = 0;  // no padding: a layout crosses the network in a handle, all of it set
  size_t slotBytes[kNumProtocols] = {0, 0, 0};  // LL: whole 16 B lines; LL128: whole 128 B lines

  // Each protocol's buffer starts on a 128-byte boundary of the connection's memory (and
  // of the buffers where they live apart): a GPU warp stores an LL128 line whole only
  // where the line is one aligned 128-byte block (ll128_primitives.h).
  static constexpr size_t kBufferAlign = 128;
  size_t bufferOffset(int proto) const {
    size_t offset = 0;
    for (int p = 0; p < proto; ++p) offset += (slotBytes[p] * nSlots + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    return sizeof(StepFifoControl) + offset;
  }
  size_t totalBytes() const { return bufferOffset(kNumProtocols); }
  // The buffers alone, where they live apart from the control block (GPU memory).
  size_t buffersBytes() const { return totalBytes() - sizeof(StepFifoControl); }
  // The Simple slots, the last buffer: under P2P read they live on the sender's GPU.
  size_t simpleSlotsBytes() const { return totalBytes() - bufferOffset(static_cast<int>(Protocol::Simple)); }
  // The buffers on the receiver's side: all, or all but the Simple slots under P2P read.
  size_t receiverBuffersBytes(bool slotsOnSender) const {
    return buffersBytes() - (slotsOnSender ? simpleSlotsBytes() : 0);
  }
  // One a rank could have made: a power-of-two slot count up to kMaxSteps (NCCL_STEPS), and
  // every slot whole lines, at most kMaxSlotBytes (none for a protocol the connection does
  // not carry: one-sided connections have only Simple's). A sender checks the layout its
  // receiver announces before it sizes anything by it.
  bool plausible() const {
    if (!validSlotCount(nSlots)) return false;
    size_t any = 0;
    for (int p = 0; p < kNumProtocols; ++p) {
      if (slotBytes[p] > kMaxSlotBytes || slotBytes[p] % kSlotLineBytes[p] != 0) return false;
      any |= slotBytes[p];
    }
    return any != 0;
  }
};

// One side of a connection: where the control block and buffers are, plus this
// side's own step counter.
struct FifoEnd {
  StepFifoControl* ctrl = nullptr;
  char* buffs[kNumProtocols] = {nullptr, nullptr, nullptr};
  size_t slotBytes[kNumProtocols] = {0, 0, 0};
  size_t slotStride[kNumProtocols] = {0, 0, 0};  // slotBytes, or the shared stride of a proxied FIFO
  int nSlots = kNcclSteps;
  bool proxied = false;  // see the header comment
  // The buffers are GPU memory apart from the control block (P2P between GPUs): the CUDA
  // executor uses their addresses as they are and maps only the control block.
  bool gpuBuffers = false;
  // A Simple send/receive on this connection may move its data straight into the
  // receiver's buffer (simple_primitives.h, beginP2p): both ends in one process, and where
  // they are GPUs, the sender's GPU can write the receiver's (p2p_transport.cc). Both ends
  // hold the same value.
  bool direct = false;
  // Sender, during such a send: the receiver's buffer it writes into (0: the slots). Thread
  // 0 of the team sets it, the others read it after a barrier.
  uint64_t directTo = 0;
  uint64_t step = 0;  // next step this side will produce (sender) or consume (receiver)
  // Sender side: the receiver's head as last read (a lower bound, since head only grows).
  // It outlives calls so that a sender re-reads head (a cache miss: the receiver has just
  // written it) only when the slots it already knows free run out.
  uint64_t headSeen = 0;
  // The call this end now serves, and on which side (call_stamp.h): a long wait compares
  // it with the call the other end is in. seq 0: unstamped work.
  CallStamp call;
  bool sending = false;
  int peer = -1;       // the rank at the other end, for error messages
  int peerPid = 0;     // that rank's process as its PID namespace numbers it, for messages (0: same process)
  int peerAlive = -1;  // that process's liveness handle (core/process_liveness.h); -1: none to watch
  uint64_t peerProcessId = 0;
  // Proxied FIFOs, for the CPU executor: the connection's own progress, which a thread that
  // publishes or waits on this end may run itself instead of handing the work to the proxy
  // thread (transport/net/net_connection.h). drive(driveArg) does nothing while the proxy
  // runs it; true when what was published needs no proxy. Null: the proxy alone moves it.
  // Never called on a GPU.
  bool (*drive)(void*) = nullptr;
  void* driveArg = nullptr;
  // The largest step a driving thread sends itself; larger ones stay the proxy's, so that
  // the network moves them while the executor computes. 16 KiB of payload with its stamp
  // trailer (a 32 KiB AllReduce of 2 ranks moves 16 KiB steps).
  static constexpr size_t kDriveMaxBytes = (16 << 10) + kStampTrailerBytes;

  CHORUS_HD char* slot(Protocol p, uint64_t s) const {
    const int i = static_cast<int>(p);
    return buffs[i] + (s & static_cast<uint64_t>(nSlots - 1)) * slotStride[i];
  }
  // Points this end at a connection's memory laid out as `layout`.
  void attach(void* base, const FifoLayout& layout) {
    attachApart(static_cast<StepFifoControl*>(base), static_cast<char*>(base) + sizeof(StepFifoControl), layout);
  }
  // The same with the buffers (layout.buffersBytes()) at `buffers`, apart from the control block.
  void attachApart(StepFifoControl* control, void* buffers, const FifoLayout& layout) {
    ctrl = control;
    for (int p = 0; p < kNumProtocols; ++p) {
      buffs[p] = static_cast<char*>(buffers) + (layout.bufferOffset(p) - sizeof(StepFifoControl));
      slotBytes[p] = layout.slotBytes[p];
      slotStride[p] = layout.slotBytes[p];
    }
    nSlots = layout.nSlots;
  }
  // Points this end at a proxied FIFO's memory (see proxiedBytes).
  void attachProxied(void* base, const FifoLayout& layout) {
    attachProxiedApart(static_cast<StepFifoControl*>(base), static_cast<char*>(base) + sizeof(StepFifoControl), layout);
  }
  // The same with the slots at `slots`, apart from the control block (GPU memory the NIC
  // reads or writes: the caller sets gpuBuffers).
  void attachProxiedApart(StepFifoControl* control, void* slots, const FifoLayout& layout) {
    ctrl = control;
    const size_t stride = proxiedStride(layout);
    for (int p = 0; p < kNumProtocols; ++p) {
      buffs[p] = static_cast<char*>(slots);
      slotBytes[p] = layout.slotBytes[p];
      slotStride[p] = stride;
    }
    nSlots = layout.nSlots;
    proxied = true;
  }
  // The largest protocol's slot, and room for the stamp that follows each step's payload.
  static size_t proxiedStride(const FifoLayout& layout) {
    size_t stride = 0;
    for (size_t b : layout.slotBytes) stride = b > stride ? b : stride;
    return stride + kStampTrailerBytes;
  }
  // A proxied FIFO: the control block, then nSlots slots shared by every protocol.
  static size_t proxiedBytes(const FifoLayout& layout) {
    return sizeof(StepFifoControl) + proxiedStride(layout) * layout.nSlots;
  }
};

// Waits until the sender `end`'s slot for its current step is free: its receiver has
// consumed the step nSlots before (head). Differences, not sums, so the comparisons hold
// across a 64-bit wrap of the counters. False when the wait was interrupted.
template <typename Exec>
CHORUS_HD bool acquireSlot(Exec& exec, FifoEnd& end) {
  const uint64_t step = end.step;
  const uint64_t nSlots = static_cast<uint64_t>(end.nSlots);
  if (step - end.headSeen < nSlots) return true;
  StepFifoControl* ctrl = end.ctrl;
  uint64_t* seen = &end.headSeen;
  *seen = Exec::loadAcquire(&ctrl->head);
  if (step - *seen < nSlots) return true;
  return exec.waitUntil(
      [ctrl, step, nSlots, seen] {
        *seen = Exec::loadAcquire(&ctrl->head);
        return step - *seen < nSlots;
      },
      end);
}

// Publishes `value` in `counter` (tail or head of `ctrl`), ordered after what it hands
// over (release), and wakes the waits asleep on it (Exec::wakeSleepers).
template <typename Exec>
CHORUS_HD void publishCounter(const FifoEnd& end, uint64_t* counter, uint64_t value) {
  Exec::storeRelease(counter, value);
  Exec::wakeSleepers(end, counter);
}

// Waits until the receiver `end`'s current step has arrived: its sender (or proxy) has
// published tail past it. False when the wait was interrupted.
template <typename Exec>
CHORUS_HD bool awaitStep(Exec& exec, const FifoEnd& end) {
  const uint64_t step = end.step;
  StepFifoControl* ctrl = end.ctrl;
  return exec.waitUntil([ctrl, step] { return static_cast<int64_t>(Exec::loadAcquire(&ctrl->tail) - step) > 0; }, end);
}

// The sending and receiving ends a primitive works with: up to kMaxPeers of each
// (a tree node receives from its children and sends to its parent, or the reverse).
constexpr int kMaxPeers = 3;
struct PeerSet {
  FifoEnd* ends[kMaxPeers] = {nullptr, nullptr, nullptr};
  int count = 0;

  PeerSet() = default;
  CHORUS_HD explicit PeerSet(FifoEnd* one) {
    if (one) ends[count++] = one;
  }
  CHORUS_HD void add(FifoEnd* end) {
    if (end && count < kMaxPeers) ends[count++] = end;
  }
};

}  // namespace chorus
