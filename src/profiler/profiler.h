// What an NCCL profiler plugin (NCCL_PROFILER_PLUGIN; loading: profiler_plugin.h) sees of
// Chorus, and the narrow interface through which the host runtime tells it: the group
// layer calls these hooks and nothing else. Without a plugin a communicator has no
// CommProfiler and a thread's GroupApiEvent never starts, so each hook costs one branch.
//
// The events, as NCCL 2.28-2.32 emit them (ABI v5 to v7; a v4 plugin gets Group, Coll,
// P2p, KernelCh, ProxyOp and ProxyStep, a Coll's or P2p's parentObj then being the Group event):
//   GroupApi        an outermost group as the user called it (a lone call's implicit group
//                   too): from its first call to the end of its ncclGroupEnd, in the first
//                   call's communicator's context; its states GroupStartApiStop (at once)
//                   and GroupEndApiStart (when ncclGroupEnd begins)
//   CollApi/P2pApi  one collective / ncclSend / ncclRecv call, started and stopped inside
//                   the call; parentObj: the GroupApi event
//   Group           one communicator's share of a group, from its launch to its end
//   Coll/P2p        one call of that launch, with the algorithm, protocol and channels it
//                   was planned with and a per-communicator sequence number per collective;
//                   parentObj: its CollApi/P2pApi event; parentGroup: the Group event
//   KernelCh        one channel a Coll or P2p ran on (channelId), with host buffers only:
//                   the calling thread runs every channel's lane between the launch's start
//                   and its end, so each spans the launch; pTimer, at the start and in the
//                   KernelChStop state recorded before the stop, is CLOCK_MONOTONIC in ns
//                   (NCCL's is the GPU's global timer, also ns); parentObj: the Coll or P2p
//   ProxyOp         one channel's share of a Coll or P2p on one network connection, one
//                   direction (peer, isSend, nSteps, chunkSize: the protocol's slot), with
//                   host buffers only; from the launch until its last step has stopped
//                   (it may outlive the Coll, as in NCCL); state ProxyOpInProgress_v4 at
//                   its first step; parentObj: the Coll or P2p (proxy_events.h)
//   ProxyStep       one network transfer of a ProxyOp (step: its index): a send from the
//                   net's isend (SendWait, transSize) to its completion, a receive from its
//                   posting (RecvWait) through its arrival (RecvGPUWait, transSize) until
//                   the executor consumed it; parentObj: the ProxyOp
//   ProxyCtrl       the process's proxy thread as each communicator with a network
//                   connection sees it: Active or Idle at each move between the two, Sleep
//                   to Wakeup for each sleep in poll(); no parent (proxy_events.h)
// (v7 adds the call's userProfilerTag to CollApi, P2pApi, Coll and P2p.)
// "From its launch to its end": with host buffers the calling thread runs the work, so the
// events stop once it has completed; with device buffers once it is enqueued on the
// stream (as NCCL's stop: the kernel runs later), and no KernelCh (the kernel's channels
// run later still, and Chorus does not read their GPU timers), and no ProxyOp (a kernel's
// steps are not counted). Not emitted: KernelLaunch, NetPlugin, ProxyCtrl's Append
// states (calls reach the proxy through FIFOs), the copy-engine and kernel phase events.
//
// The activation mask (the plugin's init sets it, and may change it later): an event
// starts when its own bit, or the bit of an event type below it, is set: NCCL's rule, so
// that a Coll always has its CollApi, GroupApi and Group above it. A call's events follow
// the mask as it was when the call was made.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/enqueue/op.h"

struct ncclComm;

namespace chorus {

class ProfilerPlugin;   // profiler_plugin.h
class ProxyOpEvents;    // proxy_events.h
class ProxyCtrlEvents;  // proxy_events.h

// The thread's group API event (one per outermost group, src/group's GroupState).
class GroupApiEvent {
 public:
  bool active() const { return active_; }
  void* handle() const { return handle_; }
  // Started by the group's first profiled call (CommProfiler::recordCall).
  void start(std::shared_ptr<const ProfilerPlugin> plugin, void* context, int rank, int groupDepth);
  // The outermost ncclGroupEnd begins / has run its group.
  void endBegins() {
    if (active_) recordEndBegins();
  }
  void stop() {
    if (active_) stopNow();
  }

 private:
  void recordEndBegins();
  void stopNow();

  std::shared_ptr<const ProfilerPlugin> plugin_;  // keeps the library loaded until the stop
  void* handle_ = nullptr;
  bool active_ = false;  // started (the plugin may have given no handle)
};

// Around the launch of an outermost group: GroupEndApiStart now, the stop at scope exit.
class GroupApiEnd {
 public:
  explicit GroupApiEnd(GroupApiEvent& event) : event_(event) { event_.endBegins(); }
  ~GroupApiEnd() { event_.stop(); }
  GroupApiEnd(const GroupApiEnd&) = delete;
  GroupApiEnd& operator=(const GroupApiEnd&) = delete;

 private:
  GroupApiEvent& event_;
};

// One communicator's context in the plugin. Used by one thread at a time for launches
// (the communicator's), while calls may record from another (a non-blocking one's user).
class CommProfiler {
 public:
  // For a communicator whose set-up has just finished: the process's plugin (loaded by the
  // first communicator) and its init. Null without a plugin, or when its init failed (one
  // WARN naming the plugin's file and the error; the communicator runs without it).
  static std::unique_ptr<CommProfiler> attach(ncclComm& comm, uint64_t commHash, int nNodes);
  ~CommProfiler();  // stops what the connections still hold, then the plugin's finalize for this communicator
  CommProfiler(const CommProfiler&) = delete;
  CommProfiler& operator=(const CommProfiler&) = delete;

  // A call just recorded (at group depth `groupDepth`, NCCL's count: 1 for a lone call):
  // the group's GroupApi event if this is its first profiled call, then the call's
  // CollApi or P2pApi event; what the launch needs is kept in op.profile.
  void recordCall(GroupApiEvent& groupApi, int groupDepth, CollOp& op);

  // A launch of `ops`, in three steps: before they are planned (points them at where the
  // planner writes its choices), once everything is staged (starts Group, Coll and P2p
  // events, and KernelCh and ProxyOp when the calling thread runs the work: `onHost`), once
  // the launch has returned (stops them; ProxyOps stop with their last step).
  void beforePlanning(std::vector<CollOp>& ops);
  void launchBegins(const std::vector<CollOp>& ops, bool onHost);
  void launchEnded();

 private:
  CommProfiler(ncclComm& comm, std::shared_ptr<const ProfilerPlugin> plugin, void* context);

  ncclComm& comm_;
  std::shared_ptr<const ProfilerPlugin> plugin_;
  void* context_;
  int rank_;
  std::shared_ptr<ProxyOpEvents> proxyEvents_;  // shared with the connections' ProxyOps
  std::unique_ptr<ProxyCtrlEvents> ctrlEvents_;
  uint64_t seqNumbers_[static_cast<int>(WorkKind::Send)] = {};  // per collective, by WorkKind
  std::vector<OpPlacement> placements_;                         // the launch's, by op
  void* groupEvent_ = nullptr;
  std::vector<void*> callEvents_;     // the launch's Coll and P2p events, by op (null: none)
  std::vector<void*> channelEvents_;  // and their KernelCh events
};

}  // namespace chorus
