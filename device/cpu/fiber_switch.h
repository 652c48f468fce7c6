// FiberContext: the saved machine state of one fiber (or of the thread's own stack), and
// the switch between two of them.
//
// Spec:
//   prepareFiber(ctx, stack, bytes, entry, arg): ctx, once switched to, runs entry(arg) on
//     the stack [stack, stack + bytes). entry must never return: it ends by switching away
//     for the last time.
//   switchFiber(from, to): saves the caller's state in `from` and resumes `to`; returns
//     when something switches back to `from`.
// State is what a call must preserve (the ABI's callee-saved registers, the stack pointer,
// the floating-point control words), nothing more: no signal mask, so no system call. On
// x86-64 a switch is a few dozen instructions; elsewhere it falls back to ucontext, whose
// swapcontext saves and restores the signal mask with a system call each time (on x86-64
// the ucontext calls and that system call were half the samples of a grouped 8-byte send
// and receive between two ranks, which took 5 us).
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace chorus {

using FiberEntry = void (*)(void* arg);

struct FiberContext {
#if defined(__x86_64__)
  void* sp = nullptr;  // the saved registers sit on the fiber's stack, below this
#else
  ucontext_t context;
  FiberEntry entry = nullptr;  // makecontext passes int arguments only: the entry and its
  void* arg = nullptr;         // argument are read here at the first switch in
#endif
};

void prepareFiber(FiberContext* ctx, void* stack, size_t bytes, FiberEntry entry, void* arg);
void switchFiber(FiberContext* from, FiberContext* to);

}  // namespace chorus
