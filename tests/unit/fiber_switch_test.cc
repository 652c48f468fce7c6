// The fiber switch (device/cpu/fiber_switch.h): control goes back and forth between the
// thread's stack and fibers with every caller's state intact, a fiber's floating-point
// modes are its own, and a new fiber's stack is aligned as the ABI requires.
#include "device/cpu/fiber_switch.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cstdint>
#include <vector>

namespace chorus {
namespace {

struct PingPong {
  FiberContext main;
  FiberContext fiber;
  std::vector<int> trace;
  int rounds = 0;
};

// Keeps several values live across each switch: a switch that lost a callee-saved
// register would change the sums.
void pingPongFiber(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  uint64_t a = 1, b = 2, c = 3, d = 5, e = 8, f = 13;
  for (int i = 0; i < p->rounds; ++i) {
    p->trace.push_back(2 * i + 1);
    a += b, b += c, c += d, d += e, e += f, f += a;
    switchFiber(&p->fiber, &p->main);
  }
  p->trace.push_back(static_cast<int>((a + b + c + d + e + f) % 1000003));
  switchFiber(&p->fiber, &p->main);  // the last time: never resumed
}

uint64_t expectedSum(int rounds) {
  uint64_t a = 1, b = 2, c = 3, d = 5, e = 8, f = 13;
  for (int i = 0; i < rounds; ++i) a += b, b += c, c += d, d += e, e += f, f += a;
  return (a + b + c + d + e + f) % 1000003;
}

TEST(FiberSwitch, ControlAlternatesAndEverySidesValuesSurvive) {
  std::vector<char> stack(64 * 1024);
  PingPong p;
  p.rounds = 1000;
  prepareFiber(&p.fiber, stack.data(), stack.size(), pingPongFiber, &p);
  uint64_t x = 7, y = 11, z = 13;
  for (int i = 0; i <= p.rounds; ++i) {
    switchFiber(&p.main, &p.fiber);
    if (i < p.rounds) p.trace.push_back(2 * i + 2);
    x = x * 3 + y, y = y * 5 + z, z = z * 7 + x;
  }
  ASSERT_EQ(p.trace.size(), static_cast<size_t>(2 * p.rounds + 1));
  for (int i = 0; i < 2 * p.rounds; ++i) ASSERT_EQ(p.trace[i], i + 1) << "at " << i;
  EXPECT_EQ(p.trace.back(), static_cast<int>(expectedSum(p.rounds)));
  uint64_t ex = 7, ey = 11, ez = 13;
  for (int i = 0; i <= p.rounds; ++i) ex = ex * 3 + ey, ey = ey * 5 + ez, ez = ez * 7 + ex;
  EXPECT_EQ(x, ex);
  EXPECT_EQ(y, ey);
  EXPECT_EQ(z, ez);
}

struct Modes {
  FiberContext main;
  FiberContext fiber;
  int seenAtStart = -1;
  int seenAfterSwitch = -1;
  uintptr_t alignedLocal = 1;
};

void modesFiber(void* arg) {
  auto* m = static_cast<Modes*>(arg);
  alignas(16) volatile char local[16] = {};
  m->alignedLocal = reinterpret_cast<uintptr_t>(&local[0]);
  m->seenAtStart = fegetround();
  fesetround(FE_UPWARD);
  switchFiber(&m->fiber, &m->main);
  m->seenAfterSwitch = fegetround();
  switchFiber(&m->fiber, &m->main);
}

TEST(FiberSwitch, FloatingPointModesAreEachContextsOwnAndTheStackIsAligned) {
  std::vector<char> stack(64 * 1024 + 8);
  Modes m;
  // An odd end: prepareFiber aligns the stack itself.
  prepareFiber(&m.fiber, stack.data() + 8, stack.size() - 8 - 3, modesFiber, &m);
  ASSERT_EQ(fesetround(FE_TOWARDZERO), 0);
  switchFiber(&m.main, &m.fiber);
  EXPECT_EQ(fegetround(), FE_TOWARDZERO) << "the fiber's rounding mode leaked into the thread's";
  switchFiber(&m.main, &m.fiber);
  fesetround(FE_TONEAREST);
  EXPECT_EQ(m.seenAtStart, FE_TONEAREST) << "a new fiber starts with the ABI's default mode";
  EXPECT_EQ(m.seenAfterSwitch, FE_UPWARD) << "the fiber's own mode was not kept across a switch";
  EXPECT_EQ(m.alignedLocal % 16, 0u);
}

}  // namespace
}  // namespace chorus
