#include "device/cpu/fiber_switch.h"

#include <cstdint>
#include <cstring>

namespace chorus {

#if defined(__x86_64__)

// chorusFiberSwitch(void** saveSp, void* loadSp), System V x86-64: pushes the callee-saved
// registers and the x87 and SSE control words on the current stack, stores the stack pointer
// in *saveSp, loads loadSp and pops the same frame from there; `ret` then continues wherever
// that stack last switched away (or, for a new fiber, at chorusFiberStart).
// chorusFiberStart: a new fiber's first return lands here with entry in %r12 and its
// argument in %r13 (placed by prepareFiber), and the stack 16-byte aligned for the call;
// its unwind information says it has no caller, so backtraces in a fiber end here. Global
// but hidden: never exported, and found by the C++ below even when LTO splits the unit.
asm(R"(
  .text
  .globl chorusFiberSwitch
  .hidden chorusFiberSwitch
  .p2align 4
  .type chorusFiberSwitch,@function
chorusFiberSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size chorusFiberSwitch, .-chorusFiberSwitch

  .globl chorusFiberStart
  .hidden chorusFiberStart
  .p2align 4
  .type chorusFiberStart,@function
chorusFiberStart:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size chorusFiberStart, .-chorusFiberStart
)");

extern "C" void chorusFiberSwitch(void** saveSp, void* loadSp);
extern "C" void chorusFiberStart();

namespace {

// The frame chorusFiberSwitch pops, lowest address first.
struct SwitchFrame {
  uint16_t x87Control;
  uint8_t pad[6];
  uint32_t mxcsr;
  uint32_t pad2;
  uint64_t r15, r14, r13, r12, rbx, rbp;
  void* returnAddress;
};
static_assert(sizeof(SwitchFrame) == 16 + 6 * 8 + 8);

constexpr uint16_t kDefaultX87Control = 0x037f;  // the ABI's initial values: round to nearest,
constexpr uint32_t kDefaultMxcsr = 0x1f80;       // every exception masked

}  // namespace

void prepareFiber(FiberContext* ctx, void* stack, size_t bytes, FiberEntry entry, void* arg) {
  // After the frame is popped, %rsp must be 16-byte aligned at chorusFiberStart's call.
  auto top = reinterpret_cast<uintptr_t>(stack) + bytes;
  top &= ~static_cast<uintptr_t>(15);
  auto* frame = reinterpret_cast<SwitchFrame*>(top - sizeof(SwitchFrame));
  memset(frame, 0, sizeof(SwitchFrame));
  frame->x87Control = kDefaultX87Control;
  frame->mxcsr = kDefaultMxcsr;
  frame->r12 = reinterpret_cast<uint64_t>(entry);
  frame->r13 = reinterpret_cast<uint64_t>(arg);
  frame->returnAddress = reinterpret_cast<void*>(&chorusFiberStart);
  ctx->sp = frame;
}

void switchFiber(FiberContext* from, FiberContext* to) { chorusFiberSwitch(&from->sp, to->sp); }

#else  // other architectures: ucontext

namespace {
thread_local FiberContext* tSwitchedTo;  // the context being switched to: a new one starts here
void startFromUcontext() {
  FiberContext* self = tSwitchedTo;
  self->entry(self->arg);
}
}  // namespace

void prepareFiber(FiberContext* ctx, void* stack, size_t bytes, FiberEntry entry, void* arg) {
  getcontext(&ctx->context);
  ctx->context.uc_stack.ss_sp = stack;
  ctx->context.uc_stack.ss_size = bytes;
  ctx->context.uc_link = nullptr;  // entry never returns
  ctx->entry = entry;
  ctx->arg = arg;
  makecontext(&ctx->context, startFromUcontext, 0);
}

void switchFiber(FiberContext* from, FiberContext* to) {
  tSwitchedTo = to;
  swapcontext(&from->context, &to->context);
}

#endif

}  // namespace chorus
