// Waits that sleep in the kernel (device/cpu/cpu_exec.h): a wait on a FIFO in shared
// memory that outlasts its spin sleeps on the counter it waits for, and the other side's
// publish wakes it.
//
// No lost wake-ups: with CHORUS_WAIT_SLEEP_US at an hour, a sleeping wait re-checks
// nothing until it is woken, so one lost wake-up hangs the run (the launcher's timeout
// then fails it). Each call has one rank arrive late, so the others' waits go to sleep:
// receivers on tail, senders on head (a late receiver leaves its FIFO full), in every
// protocol, between threads (P2P) and processes (SHM, NET); every result is checked.
// (Abort, revoke, dead peers and timeouts end sleeping waits at the CHORUS_WAIT_SLEEP_US
// bound: abort_safety_test, dead_peer_test and hang_report_test run with sleeping on.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr int kRanks = 3;
constexpr int kCalls = 60;

// Rank `late` of call `c` arrives about 3 ms after the others.
int lateRank(int call, int nranks) { return call % nranks; }

RankOutcome lateArrivals(const RankContext& rc, size_t count) {
  const int n = rc.nranks;
  std::vector<int32_t> data(count);
  for (int c = 0; c < kCalls; ++c) {
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<int32_t>((c + 1) * (rc.rank + 1) + i % 7);
    if (rc.rank == lateRank(c, n)) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const ncclResult_t r = ncclAllReduce(data.data(), data.data(), count, ncclInt32, ncclSum, rc.comm, nullptr);
    if (r != ncclSuccess) return RankOutcome::fail("call " + std::to_string(c) + ": " + resultName(r));
    // sum over ranks of (c+1)(r+1) + i%7 = (c+1) n(n+1)/2 + n (i%7)
    for (size_t i = 0; i < count; ++i) {
      const int32_t expected = (c + 1) * n * (n + 1) / 2 + n * static_cast<int32_t>(i % 7);
      if (data[i] != expected)
        return RankOutcome::fail("call " + std::to_string(c) + " element " + std::to_string(i) + ": " +
                                 std::to_string(data[i]) + ", expected " + std::to_string(expected));
    }
  }
  return RankOutcome::pass();
}

// Over NET the proxies sleep too, and the executors' publishes must ring them.
class WaitSleepTest : public ::testing::TestWithParam<std::tuple<Link, const char*>> {};

TEST_P(WaitSleepTest, LostWakeUpsWouldHang) {
  const auto [link, proto] = GetParam();
  ScopedEnv env;
  env.set("CHORUS_WAIT_SLEEP_US", "3600000000");  // an hour: only a wake-up ends a sleep
  forceLink(env, link);
  env.set("NCCL_PROTO", proto);
  env.set("NCCL_MAX_NCHANNELS", "1");  // one lane per rank: its waits sleep (lanes of one thread nap)
  // 1 MiB: several steps per call, so senders also wait for slots (head) behind a late receiver.
  const size_t count = std::string(proto) == "Simple" ? (1 << 18) : (1 << 14);
  EXPECT_RANKS_OK(runRanks(
      launchModeOf(link), kRanks, [&](const RankContext& rc) { return lateArrivals(rc, count); },
      std::chrono::seconds(120)));
}

// Over NET the executors move steps themselves (FifoEnd::drive): a sender sends a small
// step on its own thread and rings no proxy, and a receiver reads the connection itself
// before it sleeps (for up to 50 µs with a core per rank: 2 ranks; one look with more
// ranks than cores: 3), perhaps the header of a large message whose data then comes on a
// data socket. A receiver that then sleeps must have made its proxy watch what it started,
// or the step would wait for the hour. Small calls (1 KiB) and large ones (1 MiB).
class WaitSleepDrivenTest : public ::testing::TestWithParam<std::tuple<int, const char*, size_t>> {};

TEST_P(WaitSleepDrivenTest, LostWakeUpsWouldHang) {
  const auto [nranks, proto, count] = GetParam();
  ScopedEnv env;
  env.set("CHORUS_WAIT_SLEEP_US", "3600000000");
  forceLink(env, Link::kNet);
  env.set("NCCL_PROTO", proto);
  env.set("NCCL_MAX_NCHANNELS", "1");
  EXPECT_RANKS_OK(runRanks(
      LaunchMode::kProcesses, nranks, [&](const RankContext& rc) { return lateArrivals(rc, count); },
      std::chrono::seconds(120)));
}

INSTANTIATE_TEST_SUITE_P(NetEveryProtocol, WaitSleepDrivenTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values("Simple", "LL", "LL128"),
                                            ::testing::Values(size_t{256}, size_t{1} << 18)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param) + "_" +
                                  std::to_string(std::get<2>(info.param) * 4) + "B";
                         });

INSTANTIATE_TEST_SUITE_P(EveryProtocol, WaitSleepTest,
                         ::testing::Combine(::testing::Values(Link::kP2p, Link::kShm, Link::kNet),
                                            ::testing::Values("Simple", "LL", "LL128")),
                         [](const auto& info) {
                           return std::string(linkName(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace chorus_test
