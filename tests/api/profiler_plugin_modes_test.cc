// Profiler events where a communicator's calls and its launch are not one thread's plain
// sequence: one thread driving every rank of ncclCommInitAll in one group (one GroupApi
// event for the group, in the first communicator's context; each communicator's launch
// events, all started before any stops, since the ranks' work runs together), and a
// non-blocking communicator (calls on the user's thread, the launch on its worker).
#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "harness/failure_log.h"
#include "harness/profiler_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/settle.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr int kGroup = 1 << 0, kColl = 1 << 1, kKernelCh = 1 << 6, kGroupApi = 1 << 8, kCollApi = 1 << 9;

std::string pluginPath() { return std::string(CHORUS_TEST_PROFILER_PLUGIN_DIR) + "/libnccl-profiler-chorustest.so"; }

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// The event `id` of any communicator (the GroupApi of a group lives in one of them).
const ProfiledEvent* findEvent(const std::vector<ProfiledComm>& comms, const std::string& id) {
  for (const ProfiledComm& c : comms)
    if (const ProfiledEvent* e = c.byId(id)) return e;
  return nullptr;
}

TEST(ProfilerModes, OneThreadDrivesEveryRankInOneGroup) {
  constexpr int kRanks = 3;
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", pluginPath());
  env.unset("CHORUS_TEST_PROFILER_MASK");
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runAllRanksOneThread(kRanks, [](std::span<const ncclComm_t> comms) {
    std::vector<std::vector<int32_t>> values(comms.size());
    ncclGroupStart();
    for (size_t rank = 0; rank < comms.size(); ++rank) {
      values[rank].assign(100, static_cast<int32_t>(rank + 1));
      ncclAllReduce(values[rank].data(), values[rank].data(), 100, ncclInt32, ncclSum, comms[rank], nullptr);
    }
    const ncclResult_t end = ncclGroupEnd();
    std::vector<RankOutcome> outcomes(comms.size());
    for (size_t rank = 0; rank < comms.size(); ++rank) {
      if (end != ncclSuccess) outcomes[rank] = RankOutcome::fail("ncclGroupEnd returned " + resultName(end));
      if (values[rank][99] != kRanks * (kRanks + 1) / 2) outcomes[rank] = RankOutcome::fail("wrong sum");
    }
    return outcomes;
  }));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks)) << joined(problems);
  size_t groupApis = 0;
  std::vector<const ProfiledEvent*> colls;
  for (const ProfiledComm& c : comms) {
    groupApis += c.ofType(kGroupApi).size();
    if (c.finalizes != 1) problems.push_back("finalizes: " + c.init.line);
    const auto groups = c.ofType(kGroup);
    const auto apis = c.ofType(kCollApi);
    const auto calls = c.ofType(kColl);
    if (groups.size() != 1 || apis.size() != 1 || calls.size() != 1) {
      problems.push_back("expected one Group, CollApi and Coll event: " + c.init.line);
      continue;
    }
    colls.push_back(calls[0]);
    const ProfiledEvent* groupApi = findEvent(comms, apis[0]->start.field("parent"));
    if (groupApi == nullptr || groupApi->type != kGroupApi || groupApi->start.number("groupDepth") != 2)
      problems.push_back("CollApi's parent is not the group's GroupApi: " + apis[0]->start.line);
    if (calls[0]->start.field("parent") != apis[0]->id || calls[0]->start.field("parentGroup") != groups[0]->id)
      problems.push_back("Coll's parents: " + calls[0]->start.line);
  }
  EXPECT_EQ(groupApis, 1u) << "one GroupApi event for the group, whatever its communicators";
  for (const ProfiledEvent* a : colls)
    for (const ProfiledEvent* b : colls)
      if (a->startAt > b->stopAt) problems.push_back("a Coll event started after another one stopped");
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(ProfilerModes, NonBlockingCommunicatorLaunchesOnItsWorker) {
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", pluginPath());
  env.unset("CHORUS_TEST_PROFILER_MASK");
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, [](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    if (ncclResult_t r = settle(comm); r != ncclSuccess)
      return RankOutcome::fail("non-blocking init: " + resultName(r));
    int64_t value = rank + 1;
    ncclAllReduce(&value, &value, 1, ncclInt64, ncclSum, comm, nullptr);
    if (ncclResult_t r = settle(comm); r != ncclSuccess) log.add("AllReduce: " + resultName(r));
    if (value != 3) log.add("AllReduce: " + std::to_string(value));
    if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) log.add("ncclCommDestroy: " + resultName(r));
    return log.outcome();
  }));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  EXPECT_EQ(comms.size(), 2u);
  for (const ProfiledComm& c : comms) {
    const auto groups = c.ofType(kGroup);
    const auto apis = c.ofType(kCollApi);
    const auto calls = c.ofType(kColl);
    const auto channels = c.ofType(kKernelCh);  // an 8-byte call runs on one channel
    if (c.finalizes != 1 || groups.size() != 1 || apis.size() != 1 || calls.size() != 1 || channels.size() != 1 ||
        c.events.size() != 5) {
      problems.push_back("expected one GroupApi, CollApi, Group, Coll and KernelCh event and one finalize: " +
                         c.init.line);
      continue;
    }
    const ProfiledEvent& coll = *calls[0];
    if (channels[0]->start.field("parent") != coll.id || channels[0]->stopAt > coll.stopAt)
      problems.push_back("KernelCh event: " + channels[0]->start.line);
    if (coll.start.field("parent") != apis[0]->id || coll.start.field("parentGroup") != groups[0]->id ||
        coll.startAt < groups[0]->startAt || coll.stopAt > groups[0]->stopAt || coll.stops != 1)
      problems.push_back("Coll event: " + coll.start.line);
  }
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

// A thread that ends inside a group: its calls are dropped, and the group's GroupApi
// event is stopped then (as after a failed ncclGroupEnd), not left open for good.
TEST(ProfilerModes, AThreadEndingInsideAGroupStopsItsGroupEvent) {
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", pluginPath());
  env.unset("CHORUS_TEST_PROFILER_MASK");
  ProfilerLog profile(env);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  int64_t value = 1;
  std::thread([&] {
    ncclGroupStart();
    ncclAllReduce(&value, &value, 1, ncclInt64, ncclSum, comm, nullptr);
  }).join();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  ASSERT_EQ(comms.size(), 1u) << joined(problems);
  const auto groupApis = comms[0].ofType(kGroupApi);
  ASSERT_EQ(groupApis.size(), 1u) << joined(problems);
  EXPECT_NE(groupApis[0]->stopAt, std::string::npos) << "the GroupApi event was never stopped";
  EXPECT_EQ(groupApis[0]->stops, 1);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

}  // namespace
}  // namespace chorus_test
