// ProxyOpTracer (transport/net/proxy_op_trace.h): the ProxyStep events of a traced call,
// as the thread moving a connection reports its steps: in step order, each through its
// states and stopped once, the op stopped after its last step; steps posted or even
// consumed before the call was handed over still get their events, in order; stopAll
// stops what is left.
#include "transport/net/proxy_op_trace.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace chorus {
namespace {

// Records the calls as text: "start 0", "state 0 SendWait 100", "stop 0", "progress", "stop op".
class RecordingSink final : public ProxyTraceSink {
 public:
  std::vector<std::string> calls;
  void* startStep(void*, int step) override {
    calls.push_back("start " + std::to_string(step));
    return reinterpret_cast<void*>(static_cast<uintptr_t>(step + 1));
  }
  void stepState(void* step, ProxyStepState state, size_t bytes) override {
    const char* name = state == ProxyStepState::SendWait   ? "SendWait"
                       : state == ProxyStepState::RecvWait ? "RecvWait"
                                                           : "RecvGPUWait";
    calls.push_back("state " + std::to_string(index(step)) + " " + name + " " + std::to_string(bytes));
  }
  void stopStep(void* step) override { calls.push_back("stop " + std::to_string(index(step))); }
  void opInProgress(void*) override { calls.push_back("progress"); }
  void stopOp(void*) override { calls.push_back("stop op"); }

 private:
  static int index(void* step) { return static_cast<int>(reinterpret_cast<uintptr_t>(step)) - 1; }
};

ProxyOpTrace traceOf(const std::shared_ptr<RecordingSink>& sink, uint64_t first, uint64_t end, bool steps = true) {
  static int opEvent;
  return ProxyOpTrace{sink, &opEvent, first, end, steps};
}

using Calls = std::vector<std::string>;

TEST(ProxyOpTracer, SendStepsFromPostToCompletionThenTheOp) {
  auto sink = std::make_shared<RecordingSink>();
  ProxyOpTracer tracer(8);
  tracer.onPosted(9, true, 50);  // the previous call's step: no op covers it
  EXPECT_FALSE(tracer.active());
  tracer.add(traceOf(sink, 10, 12));
  EXPECT_TRUE(tracer.active());
  tracer.onPosted(10, true, 100);
  tracer.onPosted(11, true, 60);
  tracer.onSent(10);
  tracer.onSent(11);
  EXPECT_EQ(sink->calls, (Calls{"progress", "start 0", "state 0 SendWait 100", "start 1", "state 1 SendWait 60",
                                "stop 0", "stop 1", "stop op"}));
  EXPECT_FALSE(tracer.active()) << "no op left";
}

TEST(ProxyOpTracer, ReceiveStepsPostedOrConsumedBeforeTheOpStillStartInOrder) {
  auto sink = std::make_shared<RecordingSink>();
  ProxyOpTracer tracer(4);
  tracer.onPosted(20, false, 0);  // posted ahead into a free slot, before the call was handed over
  tracer.add(traceOf(sink, 20, 23));
  tracer.onPosted(21, false, 0);  // starts step 0 first
  tracer.onArrived(20, 30);
  tracer.onArrived(21, 31);
  int64_t sizes[4] = {0, 0, 0, 0};
  sizes[22 & 3] = 32;
  tracer.onConsumed(21, sizes);
  tracer.onConsumed(23, sizes);  // step 22 arrived and was consumed before any hook saw it
  EXPECT_EQ(sink->calls, (Calls{"progress", "start 0", "state 0 RecvWait 0", "start 1", "state 1 RecvWait 0",
                                "state 0 RecvGPUWait 30", "state 1 RecvGPUWait 31", "stop 0", "stop 1", "start 2",
                                "state 2 RecvWait 0", "state 2 RecvGPUWait 32", "stop 2", "stop op"}));
}

TEST(ProxyOpTracer, OpsOfConsecutiveCallsShareTheConnection) {
  auto sink = std::make_shared<RecordingSink>();
  ProxyOpTracer tracer(8);
  tracer.add(traceOf(sink, 0, 1));
  tracer.add(traceOf(sink, 1, 3));
  for (uint64_t s = 0; s < 3; ++s) tracer.onPosted(s, true, 8);
  for (uint64_t s = 0; s < 3; ++s) tracer.onSent(s);
  EXPECT_EQ(sink->calls,
            (Calls{"progress", "start 0", "state 0 SendWait 8", "progress", "start 0", "state 0 SendWait 8", "start 1",
                   "state 1 SendWait 8", "stop 0", "stop op", "stop 0", "stop 1", "stop op"}));
}

TEST(ProxyOpTracer, WithoutStepEventsTheOpStillStopsAfterItsLastStep) {
  auto sink = std::make_shared<RecordingSink>();
  ProxyOpTracer tracer(8);
  tracer.add(traceOf(sink, 5, 7, /*steps=*/false));
  tracer.onPosted(5, true, 1);
  tracer.onPosted(6, true, 1);
  tracer.onSent(5);
  EXPECT_EQ(sink->calls, (Calls{"progress"}));
  tracer.onSent(6);
  EXPECT_EQ(sink->calls, (Calls{"progress", "stop op"}));
}

TEST(ProxyOpTracer, StopAllStopsTheStepsInFlightAndTheOps) {
  auto sink = std::make_shared<RecordingSink>();
  {
    ProxyOpTracer tracer(8);
    tracer.add(traceOf(sink, 0, 4));
    tracer.add(traceOf(sink, 4, 5));
    tracer.onPosted(0, true, 1);
    tracer.onPosted(1, true, 1);
    tracer.onSent(0);
    tracer.stopAll();
    EXPECT_FALSE(tracer.active());
    tracer.onSent(1);  // nothing left to report
  }                    // the destructor stops nothing twice
  EXPECT_EQ(sink->calls, (Calls{"progress", "start 0", "state 0 SendWait 1", "start 1", "state 1 SendWait 1", "stop 0",
                                "stop 1", "stop op", "stop op"}));
  EXPECT_EQ(sink.use_count(), 1) << "the ops no longer hold the sink";
}

}  // namespace
}  // namespace chorus
