// Test fixtures shared by the primitives' unit tests: one connection laid out in
// heap memory as the P2P transport does, and one side's CPU executor context.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "device/common/reduce_ops.h"
#include "device/common/step_fifo.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {
namespace fixtures {

// One connection in zeroed heap memory, as the P2P transport lays it out.
class TestFifo {
 public:
  TestFifo(Protocol proto, size_t slotBytes, uint64_t firstStep = 0, int nSlots = kNcclSteps) : proto_(proto) {
    layout_.nSlots = nSlots;
    layout_.slotBytes[static_cast<int>(proto)] = slotBytes;
    memory_ = static_cast<char*>(std::aligned_alloc(kCacheLine, roundUp(layout_.totalBytes())));
    std::memset(memory_, 0, roundUp(layout_.totalBytes()));
    auto* ctrl = new (memory_) StepFifoControl{};
    ctrl->tail = firstStep;
    ctrl->head = firstStep;
    for (FifoEnd* end : {&sender, &receiver}) {
      end->attach(memory_, layout_);
      end->step = firstStep;
    }
    sender.peer = 1;
    receiver.peer = 0;
  }
  ~TestFifo() { std::free(memory_); }
  TestFifo(const TestFifo&) = delete;
  TestFifo& operator=(const TestFifo&) = delete;

  // The 8-byte words of the slot that step `step` uses.
  uint64_t* words(uint64_t step) { return reinterpret_cast<uint64_t*>(sender.slot(proto_, step)); }

  FifoEnd sender;
  FifoEnd receiver;

 private:
  static size_t roundUp(size_t b) { return (b + kCacheLine - 1) / kCacheLine * kCacheLine; }
  Protocol proto_;
  FifoLayout layout_;
  char* memory_;
};

struct Side {
  std::atomic<uint32_t> abort{0};
  ExecContext ctx;
  CpuExec exec{ctx};
  Side() {
    ctx.abortFlag = &abort;
    ctx.timeoutSec = 30;
  }
};

template <typename T>
RedOp<T, RedKind::Sum> sumOp() {
  return RedOp<T, RedKind::Sum>{T{}, 1};
}

}  // namespace fixtures
}  // namespace chorus
