// A profiler plugin's proxy events. ProxyOp and ProxyStep: one ProxyOp for each work item's use of
// a NET connection (a channel's share of a call, in one direction, to one peer), child of
// the call's Coll or P2p event, with the steps it will move (nSteps, counted before the
// launch runs: device/common/step_counts.h); one ProxyStep per network transfer of those
// steps, child of its ProxyOp, reported by the thread that moves it
// (transport/net/proxy_op_trace.h says when each starts, changes state and stops).
// Work the calling thread runs (the CPU executor) only: a GPU kernel's steps are not counted.
// As in NCCL, a ProxyOp may outlive its parent (a send completes after the launch ended);
// plugins that need the parent later count references to it.
// ProxyCtrl: the process's proxy thread (transport/net/proxy.h), which serves every
// communicator, as each communicator that has a network connection sees it: a short event
// for each move between working (ProxyCtrlActive) and idle (ProxyCtrlIdle), and one per
// sleep in poll(), from ProxyCtrlSleep to ProxyCtrlWakeup. No parent.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "src/enqueue/op.h"
#include "transport/net/proxy.h"
#include "transport/net/proxy_op_trace.h"

struct ncclComm;

namespace chorus {

class ProfilerPlugin;  // profiler_plugin.h

class ProxyOpEvents final : public ProxyTraceSink, public std::enable_shared_from_this<ProxyOpEvents> {
 public:
  ProxyOpEvents(std::shared_ptr<const ProfilerPlugin> plugin, void* context, int rank)
      : plugin_(std::move(plugin)), context_(context), rank_(rank) {}

  // Starts the ProxyOp events of one launch of `comm` and hands each to its connection:
  // `callEvents[i]` is the Coll/P2p event of `placements[i]`'s call (null: none), `mask`
  // the plugin's activation mask. Call before the launch runs.
  void start(ncclComm& comm, const std::vector<OpPlacement>& placements, const std::vector<void*>& callEvents,
             int mask);

  void* startStep(void* op, int step) override;
  void stepState(void* step, ProxyStepState state, size_t bytes) override;
  void stopStep(void* step) override;
  void opInProgress(void* op) override;
  void stopOp(void* op) override;

 private:
  std::shared_ptr<const ProfilerPlugin> plugin_;  // keeps the library loaded while a ProxyOp lives
  void* context_;
  int rank_;
};

class ProxyCtrlEvents final : public ProxyCtrlSink {
 public:
  ProxyCtrlEvents(std::shared_ptr<const ProfilerPlugin> plugin, void* context, int rank)
      : plugin_(std::move(plugin)), context_(context), rank_(rank) {}
  ~ProxyCtrlEvents() override;  // stops hearing, and stops a sleep still open
  // Starts hearing the proxy, once `comm` has a network connection (a launch's check).
  void attachIfProxied(ncclComm& comm);
  void proxyState(ProxyCtrlState state) override;

 private:
  std::shared_ptr<const ProfilerPlugin> plugin_;
  void* context_;
  int rank_;
  bool attached_ = false;  // the launching thread's
  std::mutex mutex_;       // the proxy thread's calls against the destructor
  void* sleep_ = nullptr;  // the open sleep's event
};

}  // namespace chorus
