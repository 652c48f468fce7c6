// What a profiler sees of the steps a NET connection moves: NCCL's ProxyOp and ProxyStep
// events. The host runtime starts a ProxyOp event for each call's use of a connection
// (the connection's steps [first, end), counted before the call runs: step_counts.h) and
// hands it to the connection (ConnectionResource::traceProxyOp); whichever thread moves
// the connection (the proxy, or an executor driving it) then reports each of its steps:
//   send:    started when the net takes it (isend), SendWait; stopped when the send completed
//   receive: started when a receive is posted for it, RecvWait; RecvGPUWait once it arrived
//            (the executor has not consumed it yet); stopped once the executor consumed it
// and stops the ProxyOp once its last step has stopped. A step posted before its call was
// handed over (a receive posted ahead into a free slot) starts when it arrives.
// A connection that fails or goes away stops what it still holds (stopAll), so every
// event started is stopped; the host runtime calls stopAll before the plugin's finalize.
// The transport knows no plugin: ProxyTraceSink is the host runtime's, and each call
// keeps its sink alive until its ProxyOp has stopped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "device/common/step_fifo.h"

namespace chorus {

enum class ProxyStepState { SendWait, RecvWait, RecvGPUWait };

class ProxyTraceSink {
 public:
  virtual ~ProxyTraceSink() = default;
  // A step of the ProxyOp `op` (`step`: its index in the op, from 0); the step's handle or null.
  virtual void* startStep(void* op, int step) = 0;
  virtual void stepState(void* step, ProxyStepState state, size_t bytes) = 0;
  virtual void stopStep(void* step) = 0;
  virtual void opInProgress(void* op) = 0;  // its first step started
  virtual void stopOp(void* op) = 0;
};

struct ProxyOpTrace {
  std::shared_ptr<ProxyTraceSink> sink;
  void* op = nullptr;  // the ProxyOp event
  uint64_t first = 0;  // the connection's steps the op covers: [first, end)
  uint64_t end = 0;
  bool wantSteps = true;  // false: the ProxyOp alone (the plugin asked for no ProxyStep)
};

// One connection's traced calls. The moving thread calls the on* hooks (never two at once:
// the connection's `busy_`); add() and stopAll() come from other threads.
class ProxyOpTracer {
 public:
  explicit ProxyOpTracer(int nSlots) : nSlots_(static_cast<uint64_t>(nSlots)) {}
  ~ProxyOpTracer() { stopAll(); }

  bool active() const { return active_.load(std::memory_order_acquire); }
  void add(const ProxyOpTrace& op);
  void onPosted(uint64_t step, bool sending, size_t bytes);  // isend / irecv handed to the net
  void onSent(uint64_t step);                                // a send completed
  void onArrived(uint64_t step, size_t bytes);               // a receive completed
  // The receiving executor consumed the steps before `head`; `sizes`: the FIFO's, by slot.
  void onConsumed(uint64_t head, const int64_t* sizes);
  void stopAll();

 private:
  struct Op {
    ProxyOpTrace trace;
    uint64_t started = 0;  // its first steps, started in order
    uint64_t stopped = 0;  // its steps stopped so far
  };
  struct Step {
    Op* op = nullptr;  // null: not tracked (its event, if any, was stopped)
    void* event = nullptr;
    uint64_t step = 0;
    bool arrived = false;  // receive: RecvGPUWait recorded
  };
  Op* opOf(uint64_t step);  // mutex_ held
  // Starts `op`'s steps up to `step` in order (those before it were posted before the op
  // was handed over: `sending` says their state) and returns `step`'s. mutex_ held.
  Step* startThrough(uint64_t step, Op* op, bool sending);
  Step* tracked(uint64_t step);        // its record, or null; mutex_ held
  Step* startReceive(uint64_t step);   // starts it (RecvWait) if an op covers it; mutex_ held
  void arrive(Step& s, size_t bytes);  // mutex_ held
  void stop(Step& s);                  // mutex_ held; pops finished ops

  const uint64_t nSlots_;
  std::mutex mutex_;
  std::atomic<bool> active_{false};
  std::deque<Op> ops_;          // in step order
  Step steps_[kMaxSteps] = {};  // by step & (nSlots - 1)
  uint64_t consumed_ = 0;       // receive: steps whose events the head has stopped
};

}  // namespace chorus
