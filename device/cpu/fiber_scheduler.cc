#include "device/cpu/fiber_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/debug.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace chorus {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

// AddressSanitizer checks every access against the stack it believes the thread runs on:
// each switch between the thread's own stack and a fiber's is announced to it. No-ops in
// other builds.
void startStackSwitch(void** fakeStack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fakeStack, bottom, size);
#else
  (void)fakeStack, (void)bottom, (void)size;
#endif
}
void finishStackSwitch(void* fakeStack, const void** bottom, size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fakeStack, bottom, size);
#else
  (void)fakeStack, (void)bottom, (void)size;
#endif
}

struct ThreadFibers {
  FiberContext mainContext;
  const void* mainBottom = nullptr;  // the thread's own stack, as AddressSanitizer reports it
  size_t mainSize = 0;
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
  if (!mapping_) return;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer knows nothing of these stacks: the redzones its frames poisoned would
  // outlive the mapping and flag whatever is mapped here next (a FIFO, say).
  ASAN_UNPOISON_MEMORY_REGION(base_, size_);
#endif
  munmap(mapping_, mappingBytes_);
}

void FiberScheduler::fiberMain(void* arg) {
  ThreadFibers& tf = tFibers;
  finishStackSwitch(nullptr, &tf.mainBottom, &tf.mainSize);
  auto* fiber = static_cast<Fiber*>(arg);
  (*fiber->task)();
  fiber->done = true;
  startStackSwitch(nullptr, tf.mainBottom, tf.mainSize);  // this fiber's frames are gone for good
  switchFiber(&fiber->context, &tf.mainContext);          // for the last time: never resumed
  __builtin_unreachable();
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
    f.stackBottom = tf.stackPool[i]->base();
    f.stackSize = tf.stackPool[i]->size();
    prepareFiber(&f.context, tf.stackPool[i]->base(), tf.stackPool[i]->size(), fiberMain, &f);
  }
  tf.live = static_cast<int>(fibers.size());
  while (tf.live > 0) {
    for (Fiber& f : fibers) {
      if (f.done) continue;
      tf.current = &f;
      void* mainFakeStack = nullptr;
      startStackSwitch(&mainFakeStack, f.stackBottom, f.stackSize);
      switchFiber(&tf.mainContext, &f.context);
      finishStackSwitch(mainFakeStack, nullptr, nullptr);
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
  startStackSwitch(&fiber->fakeStack, tf.mainBottom, tf.mainSize);
  switchFiber(&fiber->context, &tf.mainContext);
  finishStackSwitch(fiber->fakeStack, &tf.mainBottom, &tf.mainSize);
  return true;
}

}  // namespace chorus
