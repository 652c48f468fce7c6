// The LL and LL128 protocols driven directly on the CPU executor: the line formats in
// raw memory, flags across counter wraparound, partial lines, waiting for incomplete
// data, back-pressure, abort, several peers, and the ring AllReduce over threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "device/common/datatypes.h"
#include "device/common/ll128_primitives.h"
#include "device/common/ll_primitives.h"
#include "device/common/ring_algorithms.h"
#include "device/cpu/cpu_exec.h"
#include "fifo_fixture.h"

namespace chorus {
namespace {

using fixtures::Side;
using fixtures::sumOp;
using fixtures::TestFifo;

constexpr uint64_t kLLFlagWrap = uint64_t{1} << 32;

// The test's own encoders of the two line formats, independent of the primitives'.
uint64_t llWord(uint32_t data, uint64_t step) { return (uint64_t{static_cast<uint32_t>(step + 1)} << 32) | data; }

void writeLL128Line(uint64_t* line, const uint64_t* payload15, uint64_t step) {
  for (int w = 0; w < 15; ++w) line[w] = payload15[w];
  __atomic_store_n(line + 15, step + 1, __ATOMIC_RELEASE);
}

// Runs `f` on a thread and tells whether it has returned.
class Background {
 public:
  template <typename F>
  explicit Background(F f)
      : thread_([this, f] {
          f();
          done_ = true;
        }) {}
  ~Background() { join(); }
  bool done() const { return done_.load(); }
  // Gives the thread time to (wrongly) finish; true if it is still running.
  bool stillRunningAfter(int ms) const {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return !done_.load();
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// ---- formats in raw memory ----

TEST(LLFormatTest, WordsCarryDataLowAndStepPlusOneHigh) {
  const uint64_t step = 5;
  TestFifo fifo(Protocol::LL, 256, step);
  Side tx;
  LLPrimitives<uint32_t, RedOp<uint32_t, RedKind::Sum>, CpuExec> send(tx.exec, PeerSet(), PeerSet(&fifo.sender),
                                                                      sumOp<uint32_t>());
  const uint32_t in[3] = {0x11111111u, 0x22222222u, 0x33333333u};
  send.send(in, 3, false);
  ASSERT_TRUE(send.ok());
  const uint64_t* w = fifo.words(step);
  EXPECT_EQ(w[0], 0x0000000611111111ull);
  EXPECT_EQ(w[1], 0x0000000622222222ull);
  EXPECT_EQ(w[2], 0x0000000633333333ull);
  EXPECT_EQ(w[3], 0x0000000600000000ull) << "the partial last line is written whole, zero-padded";
  EXPECT_EQ(w[4], 0u) << "nothing past the step's lines";
  // In memory order: {data 4 B, flag 4 B, data 4 B, flag 4 B}, as NCCL's LL line.
  uint32_t halves[4];
  std::memcpy(halves, w, sizeof(halves));
  EXPECT_EQ(halves[0], 0x11111111u);
  EXPECT_EQ(halves[1], 6u);
  EXPECT_EQ(halves[2], 0x22222222u);
  EXPECT_EQ(halves[3], 6u);
  EXPECT_EQ(fifo.sender.ctrl->tail, step + 1) << "LL publishes tail too, for long waits (call_stamp.h)";
  EXPECT_EQ(fifo.sender.step, step + 1);
}

TEST(LL128FormatTest, FlagInWord15AndPayloadInWords0To14) {
  const uint64_t step = 5;
  TestFifo fifo(Protocol::LL128, 4 * 128, step);
  Side tx;
  LL128Primitives<uint32_t, RedOp<uint32_t, RedKind::Sum>, CpuExec> send(tx.exec, PeerSet(), PeerSet(&fifo.sender),
                                                                         sumOp<uint32_t>());
  std::vector<uint32_t> in(31);  // 124 bytes: one whole line and 4 bytes of the next
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0xa0000000u + static_cast<uint32_t>(i);
  send.send(in.data(), in.size(), false);
  ASSERT_TRUE(send.ok());
  const uint64_t* w = fifo.words(step);
  EXPECT_EQ(std::memcmp(w, in.data(), 120), 0) << "words 0..14 hold payload bytes 0..119";
  EXPECT_EQ(w[15], step + 1);
  EXPECT_EQ(w[16], 0xa000001eull) << "line 1 starts with payload bytes 120..123, zero-padded";
  for (int k = 17; k < 31; ++k) EXPECT_EQ(w[k], 0u) << "word " << k;
  EXPECT_EQ(w[31], step + 1);
  EXPECT_EQ(w[47], 0u) << "nothing past the step's lines";
  EXPECT_EQ(fifo.sender.ctrl->tail, step + 1) << "LL128 publishes tail too, for long waits (call_stamp.h)";
}

TEST(LLFormatTest, EmptyStepStillWritesOneLine) {
  TestFifo fifo(Protocol::LL, 256, 2);
  Side tx;
  LLPrimitives<uint32_t, RedOp<uint32_t, RedKind::Sum>, CpuExec> send(tx.exec, PeerSet(), PeerSet(&fifo.sender),
                                                                      sumOp<uint32_t>());
  send.send(nullptr, 0, false);
  EXPECT_EQ(fifo.words(2)[0], llWord(0, 2)) << "the receiver must have something to wait for";
  EXPECT_EQ(fifo.words(2)[1], llWord(0, 2));
}

// In the nSlots steps before a flag that is 0 mod 2^31, a step rewrites its whole slot.
TEST(LLFormatTest, RefreshStepRewritesTheWholeSlot) {
  const uint64_t refresh = (uint64_t{1} << 31) - 1 - kNcclSteps;  // first step of a refresh window
  TestFifo fifo(Protocol::LL, 8 * 16, refresh - 1);
  Side tx;
  LLPrimitives<uint32_t, RedOp<uint32_t, RedKind::Sum>, CpuExec> send(tx.exec, PeerSet(), PeerSet(&fifo.sender),
                                                                      sumOp<uint32_t>());
  const uint32_t value = 42;
  send.send(&value, 1, false);  // not a refresh step: one line
  EXPECT_EQ(fifo.words(refresh - 1)[2], 0u);
  send.send(&value, 1, false);
  const uint64_t* w = fifo.words(refresh);
  EXPECT_EQ(w[0], llWord(42, refresh));
  for (int k = 1; k < 16; ++k) EXPECT_EQ(w[k], llWord(0, refresh)) << "word " << k;
}

// ---- both protocols ----

template <Protocol P>
struct ProtocolTraits;
template <>
struct ProtocolTraits<Protocol::LL> {
  template <typename T, typename Op = RedOp<T, RedKind::Sum>>
  using Prims = LLPrimitives<T, Op, CpuExec>;
  static constexpr size_t kLine = 16, kPayload = 8;
};
template <>
struct ProtocolTraits<Protocol::LL128> {
  template <typename T, typename Op = RedOp<T, RedKind::Sum>>
  using Prims = LL128Primitives<T, Op, CpuExec>;
  static constexpr size_t kLine = 128, kPayload = 120;
};

template <typename Tag>
class LineProtocolTest : public ::testing::Test {};
using LL = std::integral_constant<Protocol, Protocol::LL>;
using LL128 = std::integral_constant<Protocol, Protocol::LL128>;
using Protocols = ::testing::Types<LL, LL128>;
class ProtocolName {
 public:
  template <typename Tag>
  static std::string GetName(int) {
    return Tag::value == Protocol::LL ? "LL" : "LL128";
  }
};
TYPED_TEST_SUITE(LineProtocolTest, Protocols, ProtocolName);

template <typename Tag>
using Traits = ProtocolTraits<Tag::value>;

TYPED_TEST(LineProtocolTest, MaxStepElemsIsWholeLinesOfPayload) {
  using Tr = Traits<TypeParam>;
  TestFifo fifo(TypeParam::value, 64 * Tr::kLine);
  Side s;
  typename Tr::template Prims<double> d(s.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<double>());
  typename Tr::template Prims<uint8_t> b(s.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint8_t>());
  EXPECT_EQ(d.maxStepElems(), 64 * Tr::kPayload / 8);
  EXPECT_EQ(b.maxStepElems(), 64 * Tr::kPayload);
}

// Many steps of varying sizes through the slots while the counters (and, for LL, the
// 32-bit flags) wrap in the middle of the stream.
template <typename Tag>
void streamAcrossWrap(uint64_t firstStep) {
  using Tr = Traits<Tag>;
  using Prims = typename Tr::template Prims<uint32_t>;
  TestFifo fifo(Tag::value, 16 * Tr::kLine, firstStep);
  Side tx, rx;
  const int kSteps = 5000;
  const size_t maxElems = 16 * Tr::kPayload / 4;
  auto sizeOf = [&](int i) { return static_cast<size_t>((i * 7) % maxElems + (i % 5 == 0 ? 0 : 1)); };
  std::thread sender([&] {
    Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint32_t>());
    std::vector<uint32_t> data(maxElems);
    for (int i = 0; i < kSteps; ++i) {
      for (size_t k = 0; k < sizeOf(i); ++k) data[k] = static_cast<uint32_t>(i * 1000 + k);
      send.send(data.data(), sizeOf(i), false);
    }
  });
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint32_t>());
  std::vector<uint32_t> out(maxElems);
  int wrong = 0;
  for (int i = 0; i < kSteps; ++i) {
    recv.recv(out.data(), sizeOf(i), false);
    for (size_t k = 0; k < sizeOf(i); ++k) wrong += out[k] != static_cast<uint32_t>(i * 1000 + k);
  }
  sender.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(recv.ok());
  EXPECT_EQ(fifo.receiver.step, firstStep + kSteps);
  EXPECT_EQ(fifo.receiver.ctrl->head, firstStep + kSteps);
}

TYPED_TEST(LineProtocolTest, StreamSurvivesCounterWraparound) { streamAcrossWrap<TypeParam>(UINT64_MAX - 37); }

TYPED_TEST(LineProtocolTest, StreamSurvivesFlagWraparoundAt2To32) { streamAcrossWrap<TypeParam>(kLLFlagWrap - 20); }

// Counts that are multiples of nothing, in 1-, 2-, 4- and 8-byte types; bytes past n untouched.
template <typename Tag, typename T>
void oddCounts() {
  using Tr = Traits<Tag>;
  using Prims = typename Tr::template Prims<T>;
  TestFifo fifo(Tag::value, 70 * Tr::kLine * (Tag::value == Protocol::LL ? 16 : 1));
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<T>());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<T>());
  for (size_t n : {1, 3, 7, 15, 121, 1023}) {
    ASSERT_LE(n, send.maxStepElems());
    std::vector<unsigned char> in(n * sizeof(T)), out((n + 8) * sizeof(T), 0xEE);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + n + 1);
    send.send(reinterpret_cast<const T*>(in.data()), n, false);
    recv.recv(reinterpret_cast<T*>(out.data()), n, false);
    ASSERT_TRUE(recv.ok());
    EXPECT_EQ(std::memcmp(out.data(), in.data(), in.size()), 0) << "n = " << n;
    for (size_t i = in.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 0xEE) << "wrote past n = " << n;
  }
}

TYPED_TEST(LineProtocolTest, OddCountsOfUint8) { oddCounts<TypeParam, uint8_t>(); }
TYPED_TEST(LineProtocolTest, OddCountsOfHalf) { oddCounts<TypeParam, Half>(); }
TYPED_TEST(LineProtocolTest, OddCountsOfFloat) { oddCounts<TypeParam, float>(); }
TYPED_TEST(LineProtocolTest, OddCountsOfDouble) { oddCounts<TypeParam, double>(); }

// Writes line `i` of step `step` (payload: uint32 values base+k) with the test's encoder.
template <typename Tag>
void writeLineByHand(TestFifo& fifo, uint64_t step, size_t i, uint32_t base) {
  uint64_t* w = fifo.words(step);
  if constexpr (Tag::value == Protocol::LL) {
    __atomic_store_n(w + 2 * i, llWord(base + 2 * i, step), __ATOMIC_RELAXED);
    __atomic_store_n(w + 2 * i + 1, llWord(base + 2 * i + 1, step), __ATOMIC_RELAXED);
  } else {
    uint32_t payload[30];
    for (int k = 0; k < 30; ++k) payload[k] = base + static_cast<uint32_t>(30 * i + k);
    uint64_t words[15];
    std::memcpy(words, payload, sizeof(words));
    writeLL128Line(w + 16 * i, words, step);
  }
}

// The receiver of a `lines`-line step at `step` must not return before its last line is
// complete, whatever the slot held before.
template <typename Tag>
void receiverWaitsForTheLastLine(TestFifo& fifo, uint64_t step, size_t lines) {
  using Tr = Traits<Tag>;
  Side rx;
  const size_t n = lines * Tr::kPayload / 4;
  std::vector<uint32_t> out(n, 0);
  typename Tr::template Prims<uint32_t> recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint32_t>());
  ASSERT_EQ(fifo.receiver.step, step);
  Background receiver([&] { recv.recv(out.data(), n, false); });
  fifo.writeStamp(step, static_cast<int64_t>(n * sizeof(uint32_t)));
  for (size_t i = 0; i + 1 < lines; ++i) writeLineByHand<Tag>(fifo, step, i, 1000);
  if constexpr (Tag::value == Protocol::LL) {  // half of the last line: one word of two
    __atomic_store_n(fifo.words(step) + 2 * (lines - 1), llWord(1000 + 2 * (lines - 1), step), __ATOMIC_RELAXED);
  } else {  // the last line's payload, its flag still the previous use's
    for (int k = 0; k < 15; ++k) fifo.words(step)[16 * (lines - 1) + k] = ~0ull;
  }
  EXPECT_TRUE(receiver.stillRunningAfter(100)) << "the receiver read a step before its last line was written";
  EXPECT_EQ(fifo.receiver.ctrl->head, step) << "head published early";
  writeLineByHand<Tag>(fifo, step, lines - 1, 1000);
  receiver.join();
  ASSERT_TRUE(recv.ok());
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(out[k], 1000 + k) << "element " << k;
  EXPECT_EQ(fifo.receiver.ctrl->head, step + 1);
}

TYPED_TEST(LineProtocolTest, ReceiverWaitsUntilTheStepIsComplete) {
  TestFifo fifo(TypeParam::value, 8 * Traits<TypeParam>::kLine, 3);
  receiverWaitsForTheLastLine<TypeParam>(fifo, 3, 8);
}

// Runs 1-element steps from the fifo's first step up to (not including) `until`.
template <typename Tag>
void smallStepsUntil(TestFifo& fifo, uint64_t until) {
  using Prims = typename Traits<Tag>::template Prims<uint32_t>;
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint32_t>());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint32_t>());
  uint32_t value = 1, out = 0;
  while (fifo.sender.step != until) {
    send.send(&value, 1, false);
    recv.recv(&out, 1, false);
  }
  ASSERT_TRUE(recv.ok());
}

// The step whose flag is 0 (the value of a never-written line) must still wait: the
// sender rewrote the slot's lines in the steps before it.
TYPED_TEST(LineProtocolTest, StepWithFlagZeroIgnoresNeverWrittenLines) {
  const uint64_t flagZeroStep = TypeParam::value == Protocol::LL ? kLLFlagWrap - 1 : UINT64_MAX;
  TestFifo fifo(TypeParam::value, 8 * Traits<TypeParam>::kLine, flagZeroStep - 20);
  smallStepsUntil<TypeParam>(fifo, flagZeroStep);
  receiverWaitsForTheLastLine<TypeParam>(fifo, flagZeroStep, 8);
}

// An LL line last written exactly 2^32 steps ago carries the current flag; the periodic
// refresh must have overwritten it. The slot is primed as if that write had happened.
TEST(LLRefreshTest, LineWritten2To32StepsAgoIsNotTakenForCurrent) {
  const uint64_t target = kLLFlagWrap + 3;  // slot 3, flag 4
  TestFifo fifo(Protocol::LL, 8 * 16, kLLFlagWrap - 20);
  uint64_t* w = fifo.words(target);
  for (int k = 0; k < 16; ++k) w[k] = llWord(0xBAD, target - kLLFlagWrap);
  smallStepsUntil<LL>(fifo, target);
  receiverWaitsForTheLastLine<LL>(fifo, target, 8);
}

// A receive step with several lines of data the sender has not produced must block the sender.
TYPED_TEST(LineProtocolTest, SenderWaitsForAFreeSlot) {
  using Prims = typename Traits<TypeParam>::template Prims<uint32_t>;
  TestFifo fifo(TypeParam::value, 2 * Traits<TypeParam>::kLine);
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint32_t>());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint32_t>());
  for (uint32_t i = 0; i < kNcclSteps; ++i) send.send(&i, 1, false);  // fills every slot
  uint32_t late = 99;
  Background sender([&] { send.send(&late, 1, false); });
  EXPECT_TRUE(sender.stillRunningAfter(100)) << "the sender overwrote a slot the receiver had not read";
  uint32_t out = 1234;
  recv.recv(&out, 1, false);  // frees slot 0
  EXPECT_EQ(out, 0u) << "step 0 was overwritten";
  sender.join();
  for (uint32_t i = 1; i < kNcclSteps; ++i) {
    recv.recv(&out, 1, false);
    EXPECT_EQ(out, i);
  }
  recv.recv(&out, 1, false);
  EXPECT_EQ(out, 99u);
}

TYPED_TEST(LineProtocolTest, AbortInterruptsABlockedReceive) {
  using Prims = typename Traits<TypeParam>::template Prims<uint32_t>;
  TestFifo fifo(TypeParam::value, 4 * Traits<TypeParam>::kLine);
  Side rx;
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint32_t>());
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rx.abort = 1;
  });
  const auto start = std::chrono::steady_clock::now();
  uint32_t out = 0;
  recv.recv(&out, 1, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  aborter.join();
  EXPECT_FALSE(recv.ok());
  EXPECT_EQ(rx.ctx.result.load(), ncclSystemError);
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(fifo.receiver.ctrl->head, 0u);
}

TYPED_TEST(LineProtocolTest, AbortInterruptsABlockedSend) {
  using Prims = typename Traits<TypeParam>::template Prims<uint32_t>;
  TestFifo fifo(TypeParam::value, 4 * Traits<TypeParam>::kLine);
  Side tx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint32_t>());
  uint32_t v = 1;
  for (int i = 0; i < kNcclSteps; ++i) send.send(&v, 1, false);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    tx.abort = 1;
  });
  send.send(&v, 1, false);
  aborter.join();
  EXPECT_FALSE(send.ok());
  EXPECT_EQ(tx.ctx.result.load(), ncclSystemError);
}

TYPED_TEST(LineProtocolTest, SlotNotAWholeNumberOfLinesUsesItsWholeLines) {
  using Prims = typename Traits<TypeParam>::template Prims<uint8_t>;
  const size_t line = Traits<TypeParam>::kLine;
  TestFifo fifo(TypeParam::value, 3 * line + 8);
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint8_t>());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp<uint8_t>());
  ASSERT_EQ(send.maxStepElems(), 3 * Traits<TypeParam>::kPayload);
  std::vector<uint8_t> in(send.maxStepElems()), out(in.size());
  for (int step = 0; step < 3 * kNcclSteps; ++step) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i + step);
    send.send(in.data(), in.size(), false);
    recv.recv(out.data(), out.size(), false);
    ASSERT_EQ(out, in) << "step " << step;
  }
}

TYPED_TEST(LineProtocolTest, SlotUnderOneLineFailsCleanly) {
  using Prims = typename Traits<TypeParam>::template Prims<uint32_t>;
  TestFifo fifo(TypeParam::value, Traits<TypeParam>::kLine - 8);
  Side tx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint32_t>());
  EXPECT_FALSE(send.ok());
  EXPECT_EQ(tx.ctx.result.load(), ncclInvalidUsage);
  std::vector<uint32_t> in(100, 1);
  p2pSend(send, in.data(), in.size());  // must return at once, not hang or loop
  EXPECT_EQ(fifo.sender.step, 0u);
}

TYPED_TEST(LineProtocolTest, OversizedStepIsRefusedNotWrittenPastTheSlot) {
  using Prims = typename Traits<TypeParam>::template Prims<uint8_t>;
  TestFifo fifo(TypeParam::value, 2 * Traits<TypeParam>::kLine);
  Side tx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp<uint8_t>());
  std::vector<uint8_t> in(send.maxStepElems() + 1, 7);
  send.send(in.data(), in.size(), false);
  EXPECT_FALSE(send.ok());
  EXPECT_EQ(fifo.words(1)[0], 0u) << "slot 1 was written";
}

// Two receive ends reduced with the rank's input, the result sent to two ends, in
// several blocks (values that would differ if an end were skipped or read twice).
TYPED_TEST(LineProtocolTest, TwoReceiveEndsReducedAndTwoSendEndsFed) {
  using Op = RedOp<float, RedKind::Sum>;
  using Prims = typename Traits<TypeParam>::template Prims<float>;
  const size_t slot = 300 * Traits<TypeParam>::kLine;
  TestFifo inA(TypeParam::value, slot), inB(TypeParam::value, slot), outC(TypeParam::value, slot),
      outD(TypeParam::value, slot);
  Side a, b, mid, c, d;
  Prims sendA(a.exec, PeerSet(), PeerSet(&inA.sender), Op{});
  Prims sendB(b.exec, PeerSet(), PeerSet(&inB.sender), Op{});
  PeerSet ins(&inA.receiver), outs(&outC.sender);
  ins.add(&inB.receiver);
  outs.add(&outD.sender);
  Prims node(mid.exec, ins, outs, Op{});
  Prims recvC(c.exec, PeerSet(&outC.receiver), PeerSet(), Op{});
  Prims recvD(d.exec, PeerSet(&outD.receiver), PeerSet(), Op{});
  const size_t n = node.maxStepElems() - 3;  // several blocks, a partial last line
  std::vector<float> va(n), vb(n), own(n), got(n), dst(n);
  for (size_t i = 0; i < n; ++i) {
    va[i] = static_cast<float>(i);
    vb[i] = static_cast<float>(1000 * i);
    own[i] = static_cast<float>(1000000 + i % 7);
  }
  for (int round = 0; round < 2; ++round) {
    sendA.send(va.data(), n, false);
    sendB.send(vb.data(), n, false);
    if (round == 0) {
      node.recvReduceSend(own.data(), n);
    } else {
      node.recvReduceCopySend(own.data(), dst.data(), n);
    }
    for (Prims* r : {&recvC, &recvD}) {
      r->recv(got.data(), n, false);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], va[i] + vb[i] + own[i]) << "round " << round << " i " << i;
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], va[i] + vb[i] + own[i]);
  EXPECT_TRUE(node.ok());
  EXPECT_EQ(inA.sender.ctrl->head, 2u);
  EXPECT_EQ(inB.sender.ctrl->head, 2u);
}

// post() (integer average) only on the final value, as Simple.
TYPED_TEST(LineProtocolTest, PostAppliedOnlyToTheFinalValue) {
  using Op = RedOp<int32_t, RedKind::SumPostDiv>;
  using Prims = typename Traits<TypeParam>::template Prims<int32_t, Op>;
  const size_t slot = 16 * Traits<TypeParam>::kLine;
  TestFifo in(TypeParam::value, slot), out(TypeParam::value, slot);
  Side a, mid, c;
  const Op op{0, 2};
  Prims first(a.exec, PeerSet(), PeerSet(&in.sender), op);
  Prims last(mid.exec, PeerSet(&in.receiver), PeerSet(&out.sender), op);
  Prims after(c.exec, PeerSet(&out.receiver), PeerSet(), op);
  const int32_t x[3] = {10, -7, 5}, y[3] = {4, 2, 100};
  int32_t dst[3], got[3];
  first.send(x, 3, true);
  last.recvReduceCopySend(y, dst, 3);
  after.recv(got, 3, false);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dst[i], (x[i] + y[i]) / 2);
    EXPECT_EQ(got[i], dst[i]) << "the final value travels as it is";
  }
}

// ---- the ring AllReduce over three threads ----

template <typename Tag, typename T, typename Op>
std::vector<std::vector<T>> ringAllReduceOnThreads(std::vector<std::vector<T>> data, const Op& op, size_t slotLines) {
  using Prims = typename Traits<Tag>::template Prims<T, Op>;
  const int n = static_cast<int>(data.size());
  const size_t count = data[0].size();
  std::vector<std::unique_ptr<TestFifo>> links;  // link r: rank r -> r+1
  std::vector<std::unique_ptr<Side>> sides;
  for (int r = 0; r < n; ++r) {
    links.push_back(std::make_unique<TestFifo>(Tag::value, slotLines * Traits<Tag>::kLine));
    sides.push_back(std::make_unique<Side>());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> ring(n);
      for (int k = 0; k < n; ++k) ring[k] = (r + k) % n;
      Prims prims(sides[r]->exec, PeerSet(&links[(r + n - 1) % n]->receiver), PeerSet(&links[r]->sender), op);
      ringAllReduce(prims, ring.data(), n, data[r].data(), data[r].data(), ChannelRange{0, count});
      EXPECT_TRUE(prims.ok()) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
  return data;
}

TYPED_TEST(LineProtocolTest, RingAllReduceInt32Sum) {
  for (size_t count : {size_t{1}, size_t{7}, size_t{10007}}) {
    std::vector<std::vector<int32_t>> data(3, std::vector<int32_t>(count));
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<int32_t>(r * 100000 - static_cast<int32_t>(i));
    auto result = ringAllReduceOnThreads<TypeParam>(data, sumOp<int32_t>(), 200);
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(result[r][i], 300000 - 3 * static_cast<int32_t>(i)) << "count " << count << " rank " << r;
  }
}

TYPED_TEST(LineProtocolTest, RingAllReduceFloatAverageByPreMulSum) {
  const size_t count = 5003;
  using Op = RedOp<float, RedKind::PreMulSum>;
  std::vector<std::vector<float>> data(3, std::vector<float>(count));
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((r + 1) * static_cast<int>(i % 1000));
  // A power-of-two scale keeps every product and sum exact, so any order gives the same bits.
  auto result = ringAllReduceOnThreads<TypeParam>(data, Op{0.25f, 1}, 24);
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(result[r][i], 6 * static_cast<float>(i % 1000) * 0.25f) << "rank " << r << " index " << i;
}

TYPED_TEST(LineProtocolTest, RingAllReduceHalfMax) {
  const size_t count = 3001;
  using Op = RedOp<Half, RedKind::Max>;
  std::vector<std::vector<Half>> data(3, std::vector<Half>(count));
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < count; ++i) data[r][i] = fromFloat<Half>(static_cast<float>((i * 7 + r * 13) % 41) - 20);
  auto result = ringAllReduceOnThreads<TypeParam>(data, Op{}, 8);
  for (size_t i = 0; i < count; ++i) {
    float expected = -1000;
    for (int r = 0; r < 3; ++r) expected = std::max(expected, toFloat(data[r][i]));
    for (int r = 0; r < 3; ++r) ASSERT_EQ(toFloat(result[r][i]), expected) << "rank " << r << " index " << i;
  }
}

}  // namespace
}  // namespace chorus
