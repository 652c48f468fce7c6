// StepFifo and the Simple protocol's primitives, driven directly on the CPU executor:
// slot reuse, back-pressure, counter wraparound, size checks and abort.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "device/common/ring_algorithms.h"
#include "device/common/simple_primitives.h"
#include "device/cpu/cpu_exec.h"
#include "fifo_fixture.h"

namespace chorus {
namespace {

using Prims = SimplePrimitives<uint32_t, RedOp<uint32_t, RedKind::Sum>, CpuExec>;

// A Simple-protocol connection (see fifo_fixture.h).
struct SimpleFifo : fixtures::TestFifo {
  explicit SimpleFifo(size_t slotBytes, uint64_t firstStep = 0) : TestFifo(Protocol::Simple, slotBytes, firstStep) {}
};

using fixtures::Side;

RedOp<uint32_t, RedKind::Sum> sumOp() { return fixtures::sumOp<uint32_t>(); }

// A sender takes its receiver's layout only if a rank could have made it (connect.cc).
TEST(FifoLayoutTest, OnlyALayoutARankCouldMakeIsPlausible) {
  FifoLayout ok;
  ok.nSlots = 8;
  ok.slotBytes[static_cast<int>(Protocol::LL)] = 64 << 10;
  ok.slotBytes[static_cast<int>(Protocol::LL128)] = 600 * 1024;
  ok.slotBytes[static_cast<int>(Protocol::Simple)] = 512 << 10;
  EXPECT_TRUE(ok.plausible());
  FifoLayout simpleOnly = ok;  // a one-sided connection's
  simpleOnly.slotBytes[static_cast<int>(Protocol::LL)] = 0;
  simpleOnly.slotBytes[static_cast<int>(Protocol::LL128)] = 0;
  EXPECT_TRUE(simpleOnly.plausible());

  auto with = [&](auto change) {
    FifoLayout l = ok;
    change(l);
    return l.plausible();
  };
  EXPECT_FALSE(with([](FifoLayout& l) { l.nSlots = 6; })) << "not a power of two";
  EXPECT_FALSE(with([](FifoLayout& l) { l.nSlots = 2 * kMaxSteps; })) << "more steps than a FIFO's stamps";
  EXPECT_FALSE(with([](FifoLayout& l) { l.nSlots = 0; }));
  EXPECT_FALSE(with([](FifoLayout& l) { l.slotBytes[static_cast<int>(Protocol::LL128)] = 1000; })) << "part of a line";
  EXPECT_FALSE(with([](FifoLayout& l) { l.slotBytes[static_cast<int>(Protocol::Simple)] = kMaxSlotBytes + 64; }));
  EXPECT_FALSE(with([](FifoLayout& l) { l.slotBytes[static_cast<int>(Protocol::Simple)] = SIZE_MAX / 2; }))
      << "sizes that would wrap the layout's sums";
  EXPECT_FALSE(with([](FifoLayout& l) {
    for (size_t& b : l.slotBytes) b = 0;
  })) << "no slots at all";
}

TEST(StepFifoTest, StepsCarryDataAndAdvanceBothCounters) {
  SimpleFifo fifo(64);
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
  std::vector<uint32_t> in = {1, 2, 3, 4}, out(4, 0);
  send.send(in.data(), in.size(), false);
  EXPECT_EQ(fifo.sender.ctrl->tail, 1u);
  EXPECT_EQ(fifo.sender.ctrl->sizes[0], 16);
  recv.recv(out.data(), out.size(), false);
  EXPECT_EQ(fifo.receiver.ctrl->head, 1u);
  EXPECT_EQ(out, in);
  EXPECT_TRUE(send.ok());
  EXPECT_TRUE(recv.ok());
}

TEST(StepFifoTest, SenderWaitsForAFreeSlot) {
  SimpleFifo fifo(16);
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
  uint32_t value = 7;
  for (int i = 0; i < kNcclSteps; ++i) send.send(&value, 1, false);  // fills every slot
  std::atomic<bool> ninthDone{false};
  std::thread sender([&] {
    uint32_t v = 99;
    send.send(&v, 1, false);
    ninthDone = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(ninthDone.load()) << "the sender overwrote a slot the receiver had not read";
  uint32_t out = 0;
  recv.recv(&out, 1, false);  // frees slot 0
  sender.join();
  EXPECT_TRUE(ninthDone.load());
  for (int i = 1; i < kNcclSteps; ++i) recv.recv(&out, 1, false);
  recv.recv(&out, 1, false);
  EXPECT_EQ(out, 99u);
}

// Streams many steps of varying sizes through the 8 slots, with the counters starting
// just below 2^64 so that they wrap in the middle of the stream.
TEST(StepFifoTest, StreamSurvivesSlotAndCounterWraparound) {
  const uint64_t firstStep = UINT64_MAX - 37;
  SimpleFifo fifo(256, firstStep);
  Side tx, rx;
  const int kSteps = 5000;
  auto sizeOf = [](int i) { return static_cast<size_t>((i * 7) % 64 + 1); };  // 1..64 elements
  std::thread sender([&] {
    Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp());
    std::vector<uint32_t> data(64);
    for (int i = 0; i < kSteps; ++i) {
      for (size_t k = 0; k < sizeOf(i); ++k) data[k] = static_cast<uint32_t>(i * 1000 + k);
      send.send(data.data(), sizeOf(i), false);
    }
  });
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
  std::vector<uint32_t> out(64);
  int wrong = 0;
  for (int i = 0; i < kSteps; ++i) {
    recv.recv(out.data(), sizeOf(i), false);
    for (size_t k = 0; k < sizeOf(i); ++k) wrong += out[k] != static_cast<uint32_t>(i * 1000 + k);
  }
  sender.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(recv.ok());
  EXPECT_EQ(fifo.receiver.step, firstStep + kSteps);  // wrapped past zero
  EXPECT_LT(fifo.receiver.step, firstStep);
}

TEST(StepFifoTest, MismatchedStepSizeFailsInsteadOfReadingGarbage) {
  SimpleFifo fifo(64);
  Side tx, rx;
  Prims send(tx.exec, PeerSet(), PeerSet(&fifo.sender), sumOp());
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
  std::vector<uint32_t> in(4, 1), out(8, 0);
  send.send(in.data(), 4, false);
  recv.recv(out.data(), 8, false);
  EXPECT_FALSE(recv.ok());
  EXPECT_EQ(rx.ctx.result.load(), ncclInvalidUsage);
  EXPECT_EQ(out[0], 0u) << "nothing is copied out of a malformed step";
}

TEST(StepFifoTest, AbortInterruptsABlockedReceive) {
  SimpleFifo fifo(64);
  Side rx;
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
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
  EXPECT_LT(seconds, 2.0);
}

TEST(StepFifoTest, TimeoutEndsAWaitThatNeverCompletes) {
  SimpleFifo fifo(64);
  Side rx;
  rx.ctx.timeoutSec = 1;
  Prims recv(rx.exec, PeerSet(&fifo.receiver), PeerSet(), sumOp());
  uint32_t out = 0;
  recv.recv(&out, 1, false);
  EXPECT_FALSE(recv.ok());
  EXPECT_EQ(rx.ctx.result.load(), ncclRemoteError) << "a stalled peer is a remote failure";
}

// The ring programs over a one-rank-per-thread ring of three FIFOs.
TEST(StepFifoTest, RingAllReduceOverThreeThreads) {
  const int n = 3;
  const size_t count = 1000;  // several rounds through 64-byte slots
  std::vector<std::unique_ptr<SimpleFifo>> links;
  for (int r = 0; r < n; ++r) links.push_back(std::make_unique<SimpleFifo>(64));  // link r: rank r -> r+1
  std::vector<std::vector<uint32_t>> data(n, std::vector<uint32_t>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<uint32_t>(r * 10 + i);
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<Side>> sides;
  for (int r = 0; r < n; ++r) sides.push_back(std::make_unique<Side>());
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      int ring[n];
      for (int k = 0; k < n; ++k) ring[k] = (r + k) % n;
      Prims prims(sides[r]->exec, PeerSet(&links[(r + n - 1) % n]->receiver), PeerSet(&links[r]->sender), sumOp());
      ringAllReduce(prims, ring, n, data[r].data(), data[r].data(), ChannelRange{0, count});
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(data[r][i], static_cast<uint32_t>(30 + 3 * i)) << "rank " << r << " index " << i;
}

}  // namespace
}  // namespace chorus
