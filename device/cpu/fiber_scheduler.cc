#include "device/cpu/fiber_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"

namespace chorus {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct ThreadFibers {
  ucontext_t mainContext;
  std::vector<std::unique_ptr<FiberStack>> stackPool;  // kept between runs: stacks are reused
  void* current = nullptr;                             // Fiber* running now, null on the main context
  int live = 0;
};
thread_local ThreadFibers tFibers;

}  // namespace

FiberStack::FiberStack(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  mappingBytes_ = bytes + page;
  void* m = mmap(nullptr, mappingBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) {
    WARN("mmap of a %zu-byte fiber stack failed: %s", mappingBytes_, strerror(errno));
    return;
  }
  mprotect(m, page, PROT_NONE);  // overflowing the stack faults instead of corrupting memory
  mapping_ = m;
  base_ = static_cast<char*>(m) + page;
  size_ = bytes;
}

FiberStack::~FiberStack() {
  if (mapping_) munmap(mapping_, mappingBytes_);
}

void FiberScheduler::trampoline() {
  auto* fiber = static_cast<Fiber*>(tFibers.current);
  (*fiber->task)();
  fiber->done = true;
  // Returning follows uc_link back to the main context.
}

bool FiberScheduler::runAll(std::vector<Task>& tasks) {
  if (tasks.size() == 1 || tFibers.current != nullptr) {
    // One lane needs no fiber; a nested run (not expected) runs its tasks in order.
    for (auto& t : tasks) t();
    return true;
  }
  ThreadFibers& tf = tFibers;
  while (tf.stackPool.size() < tasks.size()) {
    auto stack = std::make_unique<FiberStack>(kStackBytes);
    if (!stack->valid()) return false;
    tf.stackPool.push_back(std::move(stack));
  }
  std::vector<Fiber> fibers(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    Fiber& f = fibers[i];
    f.task = &tasks[i];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = tf.stackPool[i]->base();
    f.context.uc_stack.ss_size = tf.stackPool[i]->size();
    f.context.uc_link = &tf.mainContext;
    makecontext(&f.context, trampoline, 0);
  }
  tf.live = static_cast<int>(fibers.size());
  while (tf.live > 0) {
    for (Fiber& f : fibers) {
      if (f.done) continue;
      tf.current = &f;
      swapcontext(&tf.mainContext, &f.context);
      tf.current = nullptr;
      if (f.done) --tf.live;
    }
  }
  return true;
}

bool FiberScheduler::yield() {
  ThreadFibers& tf = tFibers;
  if (tf.current == nullptr || tf.live <= 1) return false;
  auto* fiber = static_cast<Fiber*>(tf.current);
  swapcontext(&fiber->context, &tf.mainContext);
  return true;
}

}  // namespace chorus
