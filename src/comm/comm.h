// The communicator: what one rank knows about its group of ranks, its connections,
// and the work waiting to run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/debug.h"
#include "device/common/work.h"
#include "nccl.h"
#include "src/bootstrap/bootstrap.h"
#include "src/comm/async_worker.h"
#include "src/comm/comm_registry.h"
#include "src/comm/flight_record.h"
#include "src/comm/trees.h"
#include "src/comm/user_red_ops.h"
#include "src/enqueue/op.h"
#include "src/tune/tuner.h"
#include "transport/transport.h"

namespace chorus {

struct PlanLanes;                     // src/enqueue/plan.h
class Executor;                       // src/executor/executor.h
class CommProfiler;                   // src/profiler/profiler.h
class RmaService;                     // src/rma/rma_service.h
class SharedConnections;              // src/comm/shared_connections.h
class BoardSegment;                   // transport/board_memory.h
struct FaultState;                    // src/fault/fault_injection.h
enum class ExecutorChoice : uint8_t;  // src/executor/executor_choice.h

// One direction of a connection with its backing resource.
struct Connection {
  FifoEnd end;
  std::unique_ptr<ConnectionResource> resource;
  const Transport* transport = nullptr;
  // splitShare/shrinkShare: the connection of the communicator this one was made from that
  // its work moves through instead of a FIFO of its own (src/comm/shared_connections.h);
  // then this one is not connected itself. Null: its own, or none.
  Connection* borrowed = nullptr;
  bool connected() const { return transport != nullptr; }
  // The connection the work moves through: the borrowed one, else this one.
  Connection& used() { return borrowed != nullptr ? *borrowed : *this; }
  const Connection& used() const { return borrowed != nullptr ? *borrowed : *this; }
};

struct Channel {
  int id = 0;
  std::vector<int> ringRanks;  // ringRanks[k]: user rank k hops downstream; [0] is self
  TreeLinks tree;              // tree channel % 2 of the double binary tree
  // Connections to the ring and tree neighbours, indexed by peer; ring and tree
  // share a connection where they share a neighbour.
  std::vector<Connection> send;
  std::vector<Connection> recv;
  // Calls f(connection) for each of its connections, connected or not.
  template <typename F>
  void forEachConnection(F&& f) {
    for (Connection& c : send) f(c);
    for (Connection& c : recv) f(c);
  }
};

// At a destroy that was no abort: marks `c`'s FIFO kBrokenByDestroy where it is a direct
// one (a proxied one's close comes from its network connection), so a peer waiting on it for
// a call this rank never made fails at once.
inline void markDestroyedFifo(Connection& c) {
  if (c.connected() && c.resource != nullptr && !c.end.proxied) markBroken(c.end.ctrl, kBrokenByDestroy);
}

// Whether [p, p + bytes) lies within [base, base + size), without forming a pointer past
// either end.
inline bool rangeWithin(const void* base, size_t size, const void* p, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto start = reinterpret_cast<uintptr_t>(base);
  return at >= start && bytes <= size && at - start <= size - bytes;
}

// A buffer registered with ncclCommRegister. `offerable`: a Send/Recv receiving into it
// may let its sender write there directly (FifoEnd::direct): any buffer of a CPU
// communicator; on a GPU communicator, memory from ncclMemAlloc on its GPU, which every GPU
// of the process that can reach it may write (other memory may not be, as cuMem memory
// another allocator mapped for its own GPU only).
struct BufferRegistration {
  void* buff;
  size_t size;
  bool offerable;
  uint64_t handle;  // what ncclCommRegister returned for it: a number no other registration has had
  bool covers(const void* p, size_t bytes) const { return rangeWithin(buff, size, p, bytes); }
};

// What the communicator honours of its ncclConfig_t (src/api/config.h).
struct CommConfig {
  bool blocking = true;
  chorus::LogName commName;  // ncclConfig_t.commName
  int minChannels = 0;       // minCTAs; 0: unset (NCCL_MIN_NCHANNELS decides)
  int maxChannels = 0;       // maxCTAs; 0: unset (NCCL_MAX_NCHANNELS decides)
  int trafficClass = -1;     // 0-255 for this communicator's network connections; -1: the nets' default
  std::string netName;       // the net its network connections use; "": the process's (NCCL_NET)
  // Whether communicators split (shrunk) from this one share its ring and tree connections
  // (src/comm/shared_connections.h); NCCL_COMM_SPLIT/SHRINK_SHARE_RESOURCES give the default.
  bool splitShare = false;
  bool shrinkShare = false;
};

// What a rank learns of another rank's copy of a window when it is registered.
struct WindowPeer {
  uint64_t size = 0;
  bool hostMemory = true;  // false: GPU memory, which one-sided calls on the host cannot reach
};

}  // namespace chorus

// A memory window (ncclCommWindowRegister): the user's buffer, as this rank registered it,
// and what the other ranks registered with it.
struct ncclWindow_vidmem {
  ncclComm* comm = nullptr;
  void* base = nullptr;
  size_t size = 0;
  int flags = 0;
  bool hostMemory = true;
  uint64_t seq = 0;  // its place among the communicator's registrations: the same window on every rank
  // Set once every rank has registered it (chorus::shareWindow): one-sided calls may use it.
  std::atomic<bool> shared{false};
  std::vector<chorus::WindowPeer> peers;  // indexed by rank
};

struct ncclComm {
  static constexpr uint64_t kMagic = 0x43686f7275734321ull;  // "ChorusC!"
  uint64_t magic = kMagic;
  // This process's number for the communicator: a group holding calls of it across the
  // calls' pins recognises it by this (comm_registry.h), since a freed address can be reused.
  const uint64_t serial;
  std::atomic<int> calls{0};  // pins held on it: API calls and group ends inside it now

  int rank = 0;
  int nranks = 0;
  int cudaDev = 0;
  int localRanks = 1;  // ranks of this communicator on this host
  // A GPU communicator's: what its connections' transports are told of each peer's GPU
  // (transport.h's LinkContext: where GPU memory for FIFOs comes from, the path between the
  // GPUs, whether the peer's can write this rank's). Empty for a CPU communicator; a
  // default LinkContext for ranks of other hosts and CPU communicator ranks.
  std::vector<chorus::LinkContext> gpuLinks;
  std::vector<std::string> nearNics;  // the NICs nearest its GPU, by the topology (LinkContext::nearNics)
  std::vector<int> nearNicPaths;      // ... and the path (a PathType) from its GPU to each
  // A GPU communicator's most lanes per kernel (kernelLaneBudget; 0: no bound): its channels
  // are at most this many, and a group's sends and receives beyond it become more kernels.
  int kernelLanes = 0;
  double timeoutSec = 600;  // CHORUS_TIMEOUT: how long a wait may see no progress (0: forever)
  chorus::CommConfig config;
  // Call numbers (device/common/call_stamp.h), counted as calls are planned: collectives
  // per communicator, sends and receives per peer. CHORUS_FINGERPRINTS=0: steps carry none.
  bool fingerprints = true;
  // CHORUS_DETERMINISTIC=1: reductions combine ranks in one order (device/common/ordered_algorithms.h).
  bool deterministic = false;
  uint64_t collSeq = 0;
  // Or'ed into the collectives' numbers where this communicator's ring and tree connections
  // are shared with others (shared_connections.h): its own tag above kStampTagShift; else 0.
  uint64_t stampTag = 0;
  std::vector<uint64_t> sendSeq, recvSeq;
  chorus::FlightRecord flight;  // the last calls, for the hang report (src/report/hang_report.h)

  std::unique_ptr<chorus::Bootstrap> bootstrap;
  std::vector<chorus::PeerInfo> peers;

  std::atomic<uint32_t> abortFlag{0};
  std::atomic<bool> ready{false};       // set-up finished: the communicator takes calls
  std::atomic<bool> finalized{false};   // ncclCommFinalize: no more work; only destroy remains
  std::atomic<uint32_t> revokeFlag{0};  // ncclCommRevoke (or NCCL_SHRINK_ABORT): no more work runs
  std::atomic<bool> suspended{false};   // ncclCommSuspend: no work runs until ncclCommResume
  int shrinks = 0;                      // ncclCommShrink calls so far (tells their messages apart)
  std::atomic<int> activeRuns{0};       // threads running this comm's work now (abort waits for them)
  // Who frees the communicator when ncclCommAbort meets its set-up (guarded by
  // chorus::commLifecycleMutex()): while a set-up is under way (initThreads: from before
  // ncclCommInitRank* publishes the handle until it returns, and on a group's set-up thread),
  // an abort only sets the flag and marks it `abandoned`, and the set-up's thread frees it. A
  // failed set-up closes it (closeComm) under the mutex first, so a late abort finds it gone.
  int initThreads = 0;
  bool abandoned = false;
  // A split's (shrink's, grow's) new communicator while this parent's job sets it up: an
  // abort of the parent reaches that set-up too (guarded by commLifecycleMutex).
  ncclComm* childInSetUp = nullptr;
  // ncclSuccess, ncclInProgress while init or async work runs, or the sticky error.
  std::atomic<int> asyncResult{ncclSuccess};
  std::mutex asyncMutex;  // orders asyncResult updates with asyncJobs
  int asyncJobs = 0;      // jobs queued on or running in `worker`

  chorus::FifoLayout collLayout;  // ring and tree connections: every protocol
  chorus::FifoLayout p2pLayout;   // send/recv connections
  std::vector<chorus::Channel> channels;
  std::vector<chorus::Connection> p2pSend;  // indexed by peer, connected on first use
  std::vector<chorus::Connection> p2pRecv;

  // What the executor sees; rebuilt whenever connections change.
  std::vector<chorus::ChannelView> channelViews;
  std::vector<chorus::FifoEnd*> p2pSendEnds;
  std::vector<chorus::FifoEnd*> p2pRecvEnds;
  chorus::CommView view;
  uint64_t viewVersion = 0;  // counts refreshView calls: a GPU copy of the view is current while it matches

  std::unique_ptr<chorus::Tuner> tuner;  // picks algorithm and protocol per call

  // Calls queued by the thread whose group holds the communicator (`callingGroup`), and the
  // calls being run: by that thread, or for a non-blocking communicator by its worker while
  // the thread queues more. Each vector has one thread at a time.
  std::vector<chorus::CollOp> pending;  // enqueued inside a group, run at ncclGroupEnd
  std::vector<chorus::CollOp> running;  // what runBlocking runs now
  // The group (of one thread) that holds calls of this communicator until it has run them,
  // or null: a communicator takes calls from one thread at a time (call_admission.h).
  std::atomic<const void*> callingGroup{nullptr};
  std::unique_ptr<chorus::PlanLanes> plan;  // the lanes of the latest call, reused
  chorus::UserRedOpTable userOps;
  // The ncclCollConfig_t fields already named in a log line (src/api/coll_config.h), one
  // bit each: a field without effect is said once per communicator, not once per call.
  std::atomic<uint32_t> collConfigFieldsNamed{0};

  std::mutex regMutex;  // guards registrations and windows
  std::vector<chorus::BufferRegistration> registrations;
  std::vector<std::unique_ptr<ncclWindow_vidmem>> windows;
  uint64_t windowsRegistered = 0;  // every registration so far, so each gets its place (seq)

  // One-sided calls (src/rma/rma_service.h): a connection each way to every peer, made when
  // the first window is registered, and the service that lands what arrives; null before.
  std::vector<chorus::Connection> rmaSend;
  std::vector<chorus::Connection> rmaRecv;
  std::unique_ptr<chorus::RmaService> rma;
  // The board (device/common/board.h, src/comm/board_setup.h): a connection per rank, this
  // rank's own block the sending one, the others' receiving; empty where there is none.
  std::vector<chorus::Connection> board;
  std::vector<chorus::FifoEnd*> boardEnds;
  std::shared_ptr<chorus::BoardSegment> boardMade;  // rank 0, between the exchanges of its set-up

  std::unique_ptr<chorus::AsyncWorker> worker;  // non-blocking communicators only

  // splitShare/shrinkShare: what this communicator shares ring and tree connections through
  // with the one it was made from and the others made from either (null: it shares none).
  std::shared_ptr<chorus::SharedConnections> sharedConns;
  // While a split or shrink with sharing sets this communicator up: the one it was made
  // from, whose connections it may borrow; null otherwise.
  ncclComm* lender = nullptr;

  // CHORUS_FAULT (src/fault/fault_injection.h): this rank's rules and its calls counted, set
  // up at the communicator's first call; null when no rule names its rank.
  std::once_flag faultsOnce;
  std::shared_ptr<chorus::FaultState> faults;

  // This communicator's context in the profiler plugin (NCCL_PROFILER_PLUGIN); null without
  // one. Set when the set-up finishes; finalized once the work has stopped (~ncclComm).
  std::unique_ptr<chorus::CommProfiler> profiler;

  // Which executor runs the calls, decided before the set-up (Cpu or Cuda), what asked
  // for it ("ncclCommInitRank", "CHORUS_EXECUTOR=cpu", ...: a static string, for WARNs), and
  // the executor that runs the work (src/executor/executor_choice.h). The executor goes
  // before the connections (~ncclComm): the CUDA executor unregisters their memory once
  // its kernels have ended.
  std::atomic<chorus::ExecutorChoice> executorChoice{};
  const char* executorAskedBy = "";
  std::unique_ptr<chorus::Executor> executor;
  // The executor once chosen, published for ncclCommGetAsyncError and ncclCommAbort,
  // which other threads may call while this one sets it up (PyTorch's watchdog does).
  std::atomic<chorus::Executor*> chosenExecutor{nullptr};

  ncclComm();
  ~ncclComm();
  ncclComm(const ncclComm&) = delete;
  ncclComm& operator=(const ncclComm&) = delete;

  void refreshView();
  // Calls f(connection) for every ring/tree and send/recv connection, connected or not: those
  // the calls' work moves through (not the one-sided ones, which their service thread reads).
  template <typename F>
  void forEachWorkConnection(F&& f) {
    for (chorus::Channel& ch : channels) ch.forEachConnection(f);
    for (chorus::Connection& c : p2pSend) f(c);
    for (chorus::Connection& c : p2pRecv) f(c);
    for (chorus::Connection& c : board) f(c);
  }
  // The same, and every one-sided connection.
  template <typename F>
  void forEachConnection(F&& f) {
    forEachWorkConnection(f);
    for (chorus::Connection& c : rmaSend) f(c);
    for (chorus::Connection& c : rmaRecv) f(c);
  }
  // Sets `flag` (abortFlag or revokeFlag), which every wait of this communicator's work
  // watches, stops its asynchronous work (kernels), and returns once no thread is inside
  // its work any more (within milliseconds: waits poll the flag).
  void haltWork(std::atomic<uint32_t>& flag);
  // ncclCommSuspend: releases the slot memory of every ring, tree and send/recv connection
  // that holds nothing still to be read (ConnectionResource::releaseIdleSlots); the
  // one-sided connections keep theirs (puts may arrive at any time), as does a connection
  // holding data not yet received. Returns the bytes released.
  size_t releaseIdleBuffers();
  // The GPU memory this rank's FIFOs hold (receive buffers on its GPU: P2P, CUDA IPC).
  uint64_t gpuFifoBytes();
  // Tells every peer this rank gave up on the communicator (its work failed, or it was
  // aborted): their waits on these connections then fail at once instead of timing out.
  void breakConnections();
  // At a destroy that was no abort: marks this rank's direct ring, tree and send/recv FIFOs
  // kBrokenByDestroy.
  void markDestroyed();
  // Whether `c`, one of this communicator's own connections, is borrowed by another one now
  // (splitShare, shared_connections.h): its traffic and its memory are not this one's alone.
  bool lentToAnother(const chorus::Connection& c);
};

namespace chorus {

// Orders ncclCommAbort with a communicator's set-up on another thread (ncclComm::abandoned).
std::mutex& commLifecycleMutex();

// The work of ncclCommInitRank* after argument checks: bootstrap, peer exchange,
// channels and their connections. Runs on the caller (blocking) or the worker.
ncclResult_t initCommunicator(ncclComm* comm, std::span<const ncclUniqueId> ids);
inline ncclResult_t initCommunicator(ncclComm* comm, const ncclUniqueId& id) {
  return initCommunicator(comm, std::span<const ncclUniqueId>(&id, 1));
}

// Connects the p2p connections `comms` need for the sends and receives they run now.
// All receivers are created (and their handles sent) before any sender waits, so one
// thread can connect every rank of a single process.
ncclResult_t connectPendingPeers(const std::vector<ncclComm*>& comms);

// Host identity (NCCL_HOSTID overrides the host name + boot id).
uint64_t localHostHash();

}  // namespace chorus
