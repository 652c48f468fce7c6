#include "src/profiler/proxy_events.h"

#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "device/common/step_counts.h"
#include "src/comm/comm.h"
#include "src/profiler/profiler_plugin.h"

namespace chorus {
namespace {

// NCCL's rule: an event starts when its bit, or the bit of an event type below it, is set.
constexpr int kStepWanted = ncclProfileProxyStep | ncclProfileNetPlugin;
constexpr int kOpWanted = ncclProfileProxyOp | kStepWanted;

}  // namespace

void ProxyOpEvents::start(ncclComm& comm, const std::vector<OpPlacement>& placements,
                          const std::vector<void*>& callEvents, int mask) {
  if ((mask & kOpWanted) == 0) return;
  // Which connection owns each end the programs use.
  std::unordered_map<const FifoEnd*, ConnectionResource*> owners;
  comm.forEachConnection([&](Connection& c) {
    if (c.connected() && c.resource != nullptr && c.end.proxied) owners.emplace(&c.end, c.resource.get());
  });
  if (owners.empty()) return;  // no NET connection: no proxy moves this communicator's steps

  // Each lane's items in order, with the call each belongs to: an end's steps follow one
  // another in its lane's order, from where the end stands now.
  struct LaneItem {
    size_t index;
    size_t call;
  };
  std::vector<std::pair<const Lane*, std::vector<LaneItem>>> lanes;
  for (size_t call = 0; call < placements.size(); ++call) {
    for (const OpPlacement::Item& item : placements[call].items) {
      auto it = lanes.begin();
      while (it != lanes.end() && it->first != item.lane) ++it;
      if (it == lanes.end()) it = lanes.insert(lanes.end(), {item.lane, {}});
      it->second.push_back({item.index, call});
    }
  }
  std::unordered_map<const FifoEnd*, uint64_t> nextStep;
  const pid_t pid = getpid();
  for (auto& [lane, items] : lanes) {
    std::sort(items.begin(), items.end(), [](const LaneItem& a, const LaneItem& b) { return a.index < b.index; });
    for (const LaneItem& item : items) {
      const WorkItem& w = lane->items[item.index];
      StepTally tally;
      countItemSteps(*lane->comm, w, &tally);
      for (int k = 0; k < tally.count; ++k) {
        const FifoEnd* end = tally.entries[k].end;
        const uint64_t steps = tally.entries[k].steps;
        const uint64_t first = nextStep.try_emplace(end, end->step).first->second;
        nextStep[end] = first + steps;
        auto owner = owners.find(end);
        void* parent = item.call < callEvents.size() ? callEvents[item.call] : nullptr;
        if (owner == owners.end() || parent == nullptr || steps == 0) continue;
        ncclProfilerEventDescr_v7_t d{};
        d.type = ncclProfileProxyOp;
        d.parentObj = parent;
        d.rank = rank_;
        d.proxyOp = ncclProfilerProxyOpDescr_t{pid,
                                               static_cast<uint8_t>(w.channel),
                                               end->peer,
                                               static_cast<int>(steps),
                                               static_cast<int>(end->slotBytes[static_cast<int>(w.proto)]),
                                               tally.entries[k].sending ? 1 : 0};
        void* op = nullptr;
        plugin_->startEvent(context_, &op, d);
        if (op == nullptr) continue;
        const ProxyOpTrace trace{shared_from_this(), op, first, first + steps, (mask & kStepWanted) != 0};
        if (!owner->second->traceProxyOp(trace)) plugin_->stopEvent(op);  // the connection failed
      }
    }
  }
}

ProxyCtrlEvents::~ProxyCtrlEvents() {
  if (attached_) Proxy::instance().removeCtrlSink(this);
  std::lock_guard<std::mutex> lock(mutex_);
  plugin_->stopEvent(sleep_);
}

void ProxyCtrlEvents::attachIfProxied(ncclComm& comm) {
  if (attached_) return;
  comm.forEachConnection([&](Connection& c) { attached_ = attached_ || (c.connected() && c.end.proxied); });
  if (attached_) Proxy::instance().addCtrlSink(this);
}

void ProxyCtrlEvents::proxyState(ProxyCtrlState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state == ProxyCtrlState::Wakeup) {
    if (sleep_ == nullptr) return;  // the sleep began before this communicator listened
    plugin_->recordEventState(sleep_, ncclProfilerProxyCtrlWakeup);
    plugin_->stopEvent(sleep_);
    sleep_ = nullptr;
    return;
  }
  ncclProfilerEventDescr_v7_t d{};
  d.type = ncclProfileProxyCtrl;
  d.rank = rank_;
  void* event = nullptr;
  plugin_->startEvent(context_, &event, d);
  const ncclProfilerEventState_t nccl = state == ProxyCtrlState::Idle     ? ncclProfilerProxyCtrlIdle
                                        : state == ProxyCtrlState::Active ? ncclProfilerProxyCtrlActive
                                                                          : ncclProfilerProxyCtrlSleep;
  plugin_->recordEventState(event, nccl);
  if (state == ProxyCtrlState::Sleep) {
    sleep_ = event;  // stopped at the wake-up
  } else {
    plugin_->stopEvent(event);
  }
}

void* ProxyOpEvents::startStep(void* op, int step) {
  ncclProfilerEventDescr_v7_t d{};
  d.type = ncclProfileProxyStep;
  d.parentObj = op;
  d.rank = rank_;
  d.proxyStep.step = step;
  void* handle = nullptr;
  plugin_->startEvent(context_, &handle, d);
  return handle;
}

void ProxyOpEvents::stepState(void* step, ProxyStepState state, size_t bytes) {
  ncclProfilerEventStateArgs_v7_t args{};
  args.proxyStep.transSize = bytes;
  const ncclProfilerEventState_t nccl = state == ProxyStepState::SendWait   ? ncclProfilerProxyStepSendWait
                                        : state == ProxyStepState::RecvWait ? ncclProfilerProxyStepRecvWait
                                                                            : ncclProfilerProxyStepRecvGPUWait;
  plugin_->recordEventState(step, nccl, &args);
}

void ProxyOpEvents::stopStep(void* step) { plugin_->stopEvent(step); }

void ProxyOpEvents::opInProgress(void* op) { plugin_->recordEventState(op, ncclProfilerProxyOpInProgress_v4); }

void ProxyOpEvents::stopOp(void* op) { plugin_->stopEvent(op); }

}  // namespace chorus
