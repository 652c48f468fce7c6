#include "transport/net/proxy_op_trace.h"

namespace chorus {

void ProxyOpTracer::add(const ProxyOpTrace& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_.push_back(Op{op});
  // Release: a moving thread that sees a step published after this sees the op (the
  // executor publishes its steps only after the host runtime handed the op over).
  active_.store(true, std::memory_order_release);
}

ProxyOpTracer::Op* ProxyOpTracer::opOf(uint64_t step) {
  for (Op& op : ops_)
    if (op.trace.first <= step && step < op.trace.end && op.stopped < op.trace.end - op.trace.first) return &op;
  return nullptr;
}

ProxyOpTracer::Step* ProxyOpTracer::startThrough(uint64_t step, Op* op, bool sending) {
  ProxyTraceSink& sink = *op->trace.sink;
  if (op->started == 0) sink.opInProgress(op->trace.op);
  for (uint64_t next = op->trace.first + op->started; next <= step; ++next, ++op->started) {
    Step& s = steps_[next & (nSlots_ - 1)];
    s = Step{op, nullptr, next, false};
    if (!op->trace.wantSteps) continue;
    s.event = sink.startStep(op->trace.op, static_cast<int>(next - op->trace.first));
    if (s.event != nullptr && next < step)
      sink.stepState(s.event, sending ? ProxyStepState::SendWait : ProxyStepState::RecvWait, 0);
  }
  return &steps_[step & (nSlots_ - 1)];
}

void ProxyOpTracer::arrive(Step& s, size_t bytes) {
  s.arrived = true;
  if (s.event != nullptr) s.op->trace.sink->stepState(s.event, ProxyStepState::RecvGPUWait, bytes);
}

void ProxyOpTracer::stop(Step& s) {
  Op* op = s.op;
  s.op = nullptr;
  if (s.event != nullptr) op->trace.sink->stopStep(s.event);
  s.event = nullptr;
  if (++op->stopped == op->trace.end - op->trace.first) op->trace.sink->stopOp(op->trace.op);
  // Steps stop in order, so the ops finish in order: the finished ones are at the front.
  while (!ops_.empty() && ops_.front().stopped == ops_.front().trace.end - ops_.front().trace.first) ops_.pop_front();
  if (ops_.empty()) active_.store(false, std::memory_order_relaxed);
}

void ProxyOpTracer::onPosted(uint64_t step, bool sending, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Op* op = opOf(step);
  if (op == nullptr || step < op->trace.first + op->started) return;
  Step* s = startThrough(step, op, sending);
  if (s->event != nullptr)
    op->trace.sink->stepState(s->event, sending ? ProxyStepState::SendWait : ProxyStepState::RecvWait, bytes);
}

void ProxyOpTracer::onSent(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Step* s = tracked(step)) stop(*s);
}

ProxyOpTracer::Step* ProxyOpTracer::tracked(uint64_t step) {
  Step& s = steps_[step & (nSlots_ - 1)];
  return s.op != nullptr && s.step == step ? &s : nullptr;
}

ProxyOpTracer::Step* ProxyOpTracer::startReceive(uint64_t step) {
  Op* op = opOf(step);
  if (op == nullptr) return nullptr;
  Step* s = startThrough(step, op, false);
  if (s->event != nullptr) op->trace.sink->stepState(s->event, ProxyStepState::RecvWait, 0);
  return s;
}

void ProxyOpTracer::onArrived(uint64_t step, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Step* s = tracked(step);
  if (s == nullptr) s = startReceive(step);  // posted before its call was handed over: it starts now
  if (s != nullptr) arrive(*s, bytes);
}

void ProxyOpTracer::onConsumed(uint64_t head, const int64_t* sizes) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Only the last nSlots steps can still be tracked (a receive is posted into a slot only
  // once the step nSlots before it was consumed).
  uint64_t step = head > nSlots_ && consumed_ < head - nSlots_ ? head - nSlots_ : consumed_;
  for (; step < head; ++step) {
    Step* s = tracked(step);
    // Arrived while no op covered it (a faster peer's step, in before this rank's call was
    // handed over): it goes through its states now.
    if (s == nullptr) s = startReceive(step);
    if (s == nullptr) continue;
    if (!s->arrived) arrive(*s, static_cast<size_t>(sizes[step & (nSlots_ - 1)]));
    stop(*s);
  }
  consumed_ = head;
}

void ProxyOpTracer::stopAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Step& s : steps_) {
    if (s.op != nullptr && s.event != nullptr) s.op->trace.sink->stopStep(s.event);
    s = Step{};
  }
  for (Op& op : ops_)
    if (op.stopped < op.trace.end - op.trace.first) op.trace.sink->stopOp(op.trace.op);
  ops_.clear();
  active_.store(false, std::memory_order_relaxed);
}

}  // namespace chorus
