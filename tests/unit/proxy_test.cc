// The proxy thread (transport/net/proxy.h) sleeps in poll() when idle, and wakes for what
// its connections wait for (a socket) and for its doorbell (an executor's publish).
// CHORUS_WAIT_SLEEP_US is an hour here, so only a wake-up can end a sleep: a lost one
// fails the test at its deadline instead of passing late.
#include "transport/net/proxy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "device/common/step_fifo.h"
#include "device/cpu/cpu_exec.h"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// Polls `done` every millisecond until it holds or 10 s passed.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A connection that waits for bytes on a pipe and for its FIFO's tail to move.
class PipeConnection final : public ProxyConnection {
 public:
  PipeConnection() { EXPECT_EQ(pipe2(fds_, O_NONBLOCK), 0); }
  ~PipeConnection() override {
    close(fds_[0]);
    close(fds_[1]);
  }

  bool progress() override {
    ++calls;
    char byte = 0;
    bool moved = read(fds_[0], &byte, 1) == 1;
    if (moved) ++bytes;
    const uint64_t tail = __atomic_load_n(&ctrl.tail, __ATOMIC_ACQUIRE);
    if (tail != tailSeen.load()) {
      tailSeen.store(tail);
      moved = true;
    }
    return moved;
  }
  bool waitSet(std::vector<pollfd>* fds) override {
    if (!canSay.load()) return false;
    fds->push_back({fds_[0], POLLIN, 0});
    return true;
  }
  void announceSleep(uint32_t bell) override { __atomic_store_n(&ctrl.proxyAsleep, bell, __ATOMIC_SEQ_CST); }

  void sendByte() { ASSERT_EQ(write(fds_[1], "x", 1), 1); }
  bool asleep() const { return __atomic_load_n(&ctrl.proxyAsleep, __ATOMIC_SEQ_CST) != 0; }

  StepFifoControl ctrl{};
  std::atomic<uint64_t> calls{0};
  std::atomic<int> bytes{0};
  std::atomic<uint64_t> tailSeen{0};
  std::atomic<bool> canSay{true};

 private:
  int fds_[2] = {-1, -1};
};

class ProxySleepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHORUS_WAIT_SLEEP_US", "3600000000", 1);  // read when the proxy thread starts
    ASSERT_FALSE(Proxy::instance().running()) << "another test's connection is still in the proxy";
  }
  void TearDown() override { unsetenv("CHORUS_WAIT_SLEEP_US"); }
};

TEST_F(ProxySleepTest, AnIdleProxySleepsAndItsConnectionsSocketWakesIt) {
  PipeConnection conn;
  Proxy& proxy = Proxy::instance();
  const uint64_t sleepsBefore = proxy.sleeps();
  proxy.add(&conn);
  ASSERT_TRUE(eventually([&] { return conn.asleep(); })) << "the proxy never announced a sleep";
  // Asleep, it makes no calls: a polling proxy would make thousands in this time.
  const uint64_t callsAsleep = conn.calls.load();
  std::this_thread::sleep_for(200ms);
  EXPECT_LT(conn.calls.load() - callsAsleep, 10u);
  for (int i = 1; i <= 3; ++i) {
    conn.sendByte();
    EXPECT_TRUE(eventually([&] { return conn.bytes.load() == i; })) << "byte " << i << " did not wake the proxy";
    EXPECT_TRUE(eventually([&] { return conn.asleep(); })) << "no sleep after byte " << i;
  }
  EXPECT_GT(proxy.sleeps(), sleepsBefore);
  proxy.remove(&conn);  // rings the doorbell: returns at once, not after the hour
  EXPECT_FALSE(proxy.running());
  EXPECT_FALSE(conn.asleep()) << "a removed connection keeps no announcement";
}

TEST_F(ProxySleepTest, AnExecutorsPublishRingsTheDoorbell) {
  PipeConnection conn;
  Proxy& proxy = Proxy::instance();
  proxy.add(&conn);
  for (uint64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(eventually([&] { return conn.asleep(); })) << "before step " << step;
    FifoEnd end;
    end.ctrl = &conn.ctrl;
    publishCounter<CpuExec>(end, &conn.ctrl.tail, step);  // what an executor's send does
    EXPECT_TRUE(eventually([&] { return conn.tailSeen.load() == step; })) << "step " << step << " did not wake it";
  }
  proxy.remove(&conn);
}

TEST_F(ProxySleepTest, AConnectionThatCannotSayWhatItWaitsForKeepsTheProxyPolling) {
  PipeConnection quiet, polled;
  polled.canSay = false;
  Proxy& proxy = Proxy::instance();
  const uint64_t sleepsBefore = proxy.sleeps();
  // `polled` first: with `quiet` alone the proxy may sleep before the second add() rings it.
  proxy.add(&polled);
  proxy.add(&quiet);
  const uint64_t calls = polled.calls.load();
  const uint64_t quietCalls = quiet.calls.load();
  EXPECT_TRUE(eventually([&] { return polled.calls.load() > calls + 100 && quiet.calls.load() > quietCalls + 100; }));
  // Never slept (each attempt announces, finds `polled` unable to say, and takes it back).
  EXPECT_EQ(proxy.sleeps(), sleepsBefore);
  // Once it can say, the proxy sleeps; a new connection wakes it to be polled.
  polled.canSay = true;
  EXPECT_TRUE(eventually([&] { return quiet.asleep() && polled.asleep(); }));
  PipeConnection added;
  added.canSay = false;
  proxy.add(&added);
  EXPECT_TRUE(eventually([&] { return added.calls.load() > 100; })) << "add() did not wake the sleeping proxy";
  proxy.remove(&added);
  proxy.remove(&polled);
  proxy.remove(&quiet);
  EXPECT_FALSE(proxy.running());
}

}  // namespace
}  // namespace chorus
