// Test fixtures shared by the primitives' unit tests: one connection laid out in
// heap memory as the P2P transport does, and one side's CPU executor context.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "device/common/ll_primitives.h"
#include "device/common/reduce_ops.h"
#include "device/common/step_fifo.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {
namespace fixtures {

// One connection in zeroed heap memory, as the P2P transport lays it out.
class TestFifo {
 public:
  // `slotBytes`: what the data of a step may use; LL and LL128 slots get their stamp lines
  // (ll_primitives.h) on top.
  TestFifo(Protocol proto, size_t slotBytes, uint64_t firstStep = 0, int nSlots = kNcclSteps)
      : proto_(proto), stampBytes_(stampBytesOf(proto)) {
    layout_.nSlots = nSlots;
    layout_.slotBytes[static_cast<int>(proto)] = slotBytes + stampBytes_;
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

  // The 8-byte words of the data of the slot that step `step` uses (past its stamp lines).
  uint64_t* words(uint64_t step) { return reinterpret_cast<uint64_t*>(sender.slot(proto_, step) + stampBytes_); }

  // Writes step `step`'s stamp lines as a sender of unstamped work (call_stamp.h: seq 0)
  // with `bytes` of data: what a test that writes lines by hand sends first.
  void writeStamp(uint64_t step, int64_t bytes) {
    auto* line = reinterpret_cast<uint64_t*>(sender.slot(proto_, step));
    unsigned char payload[kLineStampBytes] = {};
    const CallStamp call{};
    std::memcpy(payload, &bytes, sizeof(bytes));  // {bytes, CallStamp{}}
    std::memcpy(payload + sizeof(bytes), &call, sizeof(call));
    if (proto_ == Protocol::LL) {
      for (size_t i = 0; i < kLineStampBytes / 4; ++i) {
        uint32_t half;
        std::memcpy(&half, payload + 4 * i, 4);
        __atomic_store_n(line + i, (uint64_t{static_cast<uint32_t>(step + 1)} << 32) | half, __ATOMIC_RELAXED);
      }
      return;
    }
    std::memcpy(line, payload, sizeof(payload));
    __atomic_store_n(line + 15, step + 1, __ATOMIC_RELEASE);
  }

  FifoEnd sender;
  FifoEnd receiver;

 private:
  static size_t roundUp(size_t b) { return (b + kCacheLine - 1) / kCacheLine * kCacheLine; }
  static size_t stampBytesOf(Protocol p) {
    if (p == Protocol::Simple) return 0;
    return lineStampLines(p) * (p == Protocol::LL ? 16 : 128);
  }
  Protocol proto_;
  size_t stampBytes_;
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
