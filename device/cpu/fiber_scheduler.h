// FiberScheduler: runs several lanes of work on the calling thread.
//
// A lane's program is written as straight-line blocking code (as a GPU thread block
// spins on its FIFOs); on the CPU each lane runs on its own fiber, and a wait that
// cannot proceed yields to the next lane. So one thread can drive every rank of
// ncclCommInitAll inside one group, and a group's sends and receives progress
// together, without extra threads or deadlock.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "device/cpu/fiber_switch.h"

namespace chorus {

class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  void* base() const { return base_; }
  size_t size() const { return size_; }
  bool valid() const { return base_ != nullptr; }

 private:
  void* mapping_ = nullptr;  // includes a guard page below the stack
  size_t mappingBytes_ = 0;
  void* base_ = nullptr;
  size_t size_ = 0;
};

class FiberScheduler {
 public:
  using Task = std::function<void()>;

  // Runs every task to completion. With one task it runs directly, no fiber.
  // Returns false if fiber stacks could not be allocated (nothing ran).
  static bool runAll(std::vector<Task>& tasks);

  // Called by a waiting task: lets the other tasks of this thread run. Returns
  // false when there is no other task (the caller should yield the CPU instead).
  static bool yield();

 private:
  struct Fiber {
    FiberContext context;
    Task* task = nullptr;
    bool done = false;
    const void* stackBottom = nullptr;  // its stack, for AddressSanitizer's stack switches
    size_t stackSize = 0;
    void* fakeStack = nullptr;  // AddressSanitizer's while the fiber is switched out
  };
  static void fiberMain(void* fiber);
};

}  // namespace chorus
