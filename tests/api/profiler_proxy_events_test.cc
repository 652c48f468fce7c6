// A profiler plugin's ProxyOp and ProxyStep events over the network transport (NET,
// forced with NCCL_P2P_DISABLE/NCCL_SHM_DISABLE), through the test plugin of tests/plugins:
// every collective kind, Send and Recv, with each protocol, ring and tree, one and several
// network steps per call. Each ProxyOp is the child of a Coll or P2p event, says which
// peer, channel and direction it serves, and its nSteps is exactly the number of ProxyStep
// events that follow under it (numbered 0..nSteps-1, each through its states and stopped
// once): the counts known before the call runs (device/common/step_counts.h) must match
// the steps the connection then moves. What a rank sends to a peer on a channel for a call
// is what that peer receives (the same nSteps at both ends). Over shared memory, and with
// a mask that does not ask for them, there are none. ProxyCtrl events tell the proxy
// thread's activity and sleeps. Results are checked: profiling changes nothing.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness/failure_log.h"
#include "harness/profiler_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr int kColl = 1 << 1, kP2p = 1 << 2, kProxyOp = 1 << 3, kProxyStep = 1 << 4, kProxyCtrl = 1 << 5;
// recordEventState's states (ncclProfilerEventState_t).
constexpr int kSendWait = 9, kRecvWait = 10, kRecvGPUWait = 12, kProxyOpInProgress = 19;
constexpr int kCtrlIdle = 13, kCtrlActive = 14, kCtrlSleep = 15, kCtrlWakeup = 16;

constexpr size_t kSmall = 1000;     // floats: one step per channel on most connections
constexpr size_t kLarge = 1 << 20;  // floats: many steps (4 MiB)

std::string pluginPath(const char* file) { return std::string(CHORUS_TEST_PROFILER_PLUGIN_DIR) + "/" + file; }

// The test plugin with activation mask `mask`; over the network (NET) or the default transports.
void profileWith(ScopedEnv& env, int mask, bool overNetwork) {
  env.set("NCCL_PROFILER_PLUGIN", pluginPath("libnccl-profiler-chorustest.so"));
  env.set("CHORUS_TEST_PROFILER_MASK", std::to_string(mask));
  if (!overNetwork) return;
  env.set("NCCL_P2P_DISABLE", "1");
  env.set("NCCL_SHM_DISABLE", "1");
}

// Every collective kind at two sizes, then a Send to the next rank and a Recv from the
// previous one in a group, each result checked.
RankOutcome runCalls(int rank, int nranks, const ncclUniqueId& id) {
  FailureLog log;
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank); r != ncclSuccess)
    return RankOutcome::fail("ncclCommInitRank returned " + resultName(r));
  auto check = [&](const char* what, ncclResult_t r) {
    if (r != ncclSuccess) log.add(std::string(what) + " returned " + resultName(r));
  };
  for (size_t count : {kSmall, kLarge}) {
    std::vector<float> in(count * nranks, static_cast<float>(rank + 1)), out(count * nranks, -1);
    check("AllReduce", ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr));
    if (out[0] != nranks * (nranks + 1) / 2.0f || out[count - 1] != out[0]) log.add("AllReduce: wrong sum");
    check("Broadcast", ncclBroadcast(in.data(), out.data(), count, ncclFloat32, 1, comm, nullptr));
    if (out[count - 1] != 2.0f) log.add("Broadcast: not rank 1's value");
    check("Reduce", ncclReduce(in.data(), out.data(), count, ncclFloat32, ncclMax, 0, comm, nullptr));
    if (rank == 0 && out[count - 1] != static_cast<float>(nranks)) log.add("Reduce: wrong max");
    check("AllGather", ncclAllGather(in.data(), out.data(), count, ncclFloat32, comm, nullptr));
    if (out[count * nranks - 1] != static_cast<float>(nranks)) log.add("AllGather: wrong last block");
    check("ReduceScatter", ncclReduceScatter(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr));
    if (out[count - 1] != nranks * (nranks + 1) / 2.0f) log.add("ReduceScatter: wrong sum");
  }
  std::vector<int32_t> sent(kLarge / 2, rank), received(kLarge / 2, -1);
  ncclGroupStart();
  ncclSend(sent.data(), sent.size(), ncclInt32, (rank + 1) % nranks, comm, nullptr);
  ncclRecv(received.data(), received.size(), ncclInt32, (rank + nranks - 1) % nranks, comm, nullptr);
  check("the Send/Recv group", ncclGroupEnd());
  if (received.back() != (rank + nranks - 1) % nranks) log.add("Recv: wrong data");
  check("ncclCommDestroy", ncclCommDestroy(comm));
  return log.outcome();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// One communicator's ProxyOp and ProxyStep events; adds each op's (rank, peer, channel,
// call) -> nSteps to `sends` or `recvs` for the cross-rank check.
using OpKey = std::tuple<long long, long long, long long, std::string>;  // sender, receiver, channel, call
void checkComm(const ProfiledComm& c, bool wantSteps, std::map<OpKey, long long>* sends,
               std::map<OpKey, long long>* recvs, std::vector<std::string>* problems) {
  const long long rank = c.init.number("rank");
  auto fail = [&](const std::string& what) { problems->push_back("rank " + std::to_string(rank) + ": " + what); };
  // The process's own pid: the plugin writes profile.<pid>.
  const std::string pid = c.file.substr(c.file.rfind('.') + 1);
  std::map<std::string, std::vector<const ProfiledEvent*>> stepsOf;
  for (const ProfiledEvent* s : c.ofType(kProxyStep)) stepsOf[s->start.field("parent")].push_back(s);
  std::map<std::string, int> collSeen;  // Coll and P2p events with at least one ProxyOp
  for (const ProfiledEvent* op : c.ofType(kProxyOp)) {
    const ProfilerRecord& d = op->start;
    const ProfiledEvent* parent = c.byId(d.field("parent"));
    if (parent == nullptr || (parent->type != kColl && parent->type != kP2p))
      fail("parent is not a Coll or P2p event: " + d.line);
    const long long nSteps = d.number("nSteps"), peer = d.number("peer"), isSend = d.number("isSend");
    if (d.field("pid") != pid || nSteps < 1 || peer < 0 || peer == rank || (isSend != 0 && isSend != 1) ||
        d.number("chunkSize") <= 0)
      fail("fields: " + d.line);
    if (op->stops != 1) fail(std::to_string(op->stops) + " stops: " + d.line);
    if (parent == nullptr) continue;
    ++collSeen[parent->id];
    // The call, as both ends name it: a collective's sequence number, or the direction's P2p.
    const std::string call =
        parent->type == kColl ? parent->start.field("func") + "#" + parent->start.field("seq") : "p2p";
    const OpKey key{isSend ? rank : peer, isSend ? peer : rank, d.number("channelId"), call};
    ((isSend ? *sends : *recvs)[key]) += nSteps;
    const std::vector<const ProfiledEvent*>& steps = stepsOf[op->id];
    if (!wantSteps) {
      if (!steps.empty()) fail("ProxyStep events although the mask asks for none: " + d.line);
      continue;
    }
    if (static_cast<long long>(steps.size()) != nSteps) {
      std::string numbers;
      for (const ProfiledEvent* step : steps) {
        numbers += ' ';
        numbers += step->start.field("step");
      }
      fail(std::to_string(steps.size()) + " ProxyStep events (steps" + numbers + ") under " + d.line);
      continue;
    }
    if (op->states.empty() || op->states[0].second != kProxyOpInProgress) fail("no InProgress state: " + d.line);
    for (long long i = 0; i < nSteps; ++i) {
      const ProfiledEvent& s = *steps[i];
      std::vector<int> states;
      for (const auto& [at, state] : s.states) states.push_back(state);
      const std::vector<int> expected =
          isSend ? std::vector<int>{kSendWait} : std::vector<int>{kRecvWait, kRecvGPUWait};
      const bool sized = !s.stateRecords.empty() && s.stateRecords.back().number("transSize") > 0;
      if (s.start.number("step") != i || s.stops != 1 || states != expected || !sized || s.stopAt > op->stopAt) {
        std::string seen;
        for (int state : states) {
          seen += ' ';
          seen += std::to_string(state);
        }
        fail("step " + std::to_string(i) + " (states" + seen + ") of " + d.line);
      }
    }
  }
  // Every call moved data over the network, so each has ProxyOps: both directions.
  for (int type : {kColl, kP2p})
    for (const ProfiledEvent* e : c.ofType(type))
      if (collSeen[e->id] == 0) fail("no ProxyOp under " + e->start.line);
}

struct ProxyCase {
  const char* algo;
  const char* proto;
  int nranks;
  LaunchMode mode;
  int mask;
};

class ProfilerProxyEventsTest : public testing::TestWithParam<ProxyCase> {};

TEST_P(ProfilerProxyEventsTest, EachNetworkStepIsReportedUnderItsCall) {
  const ProxyCase& p = GetParam();
  ScopedEnv env;
  profileWith(env, p.mask, /*overNetwork=*/true);
  env.set("NCCL_MIN_NCHANNELS", "2");
  env.set("NCCL_ALGO", p.algo);
  env.set("NCCL_PROTO", p.proto);
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(p.mode, p.nranks, runCalls));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  if (comms.size() != static_cast<size_t>(p.nranks)) problems.push_back(std::to_string(comms.size()) + " inits");
  std::map<OpKey, long long> sends, recvs;
  for (const ProfiledComm& c : comms) checkComm(c, (p.mask & kProxyStep) != 0, &sends, &recvs, &problems);
  if (sends.empty()) problems.push_back("no ProxyOp events");
  for (const auto& [key, steps] : sends) {
    auto [from, to, channel, call] = key;
    const std::string name = call + " channel " + std::to_string(channel) + " from rank " + std::to_string(from) +
                             " to rank " + std::to_string(to);
    if (recvs.count(key) == 0 || recvs[key] != steps)
      problems.push_back(name + ": " + std::to_string(steps) + " steps sent, " +
                         std::to_string(recvs.count(key) ? recvs[key] : 0) + " received");
  }
  if (recvs.size() != sends.size()) problems.push_back("receives without their sends");
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

INSTANTIATE_TEST_SUITE_P(Net, ProfilerProxyEventsTest,
                         testing::Values(ProxyCase{"Ring", "Simple", 2, LaunchMode::kThreads, 0x7fff},
                                         ProxyCase{"Ring", "LL", 3, LaunchMode::kThreads, 0x7fff},
                                         ProxyCase{"Ring", "LL128", 2, LaunchMode::kProcesses, 0x7fff},
                                         ProxyCase{"Tree", "Simple", 3, LaunchMode::kProcesses, 0x7fff},
                                         ProxyCase{"Tree", "LL", 4, LaunchMode::kThreads, kProxyStep},
                                         ProxyCase{"Ring", "Simple", 3, LaunchMode::kThreads, kProxyOp}),
                         [](const testing::TestParamInfo<ProxyCase>& info) {
                           // Appended piece by piece: GCC 12 misreads a chain of + (-Wrestrict).
                           std::string name = info.param.algo;
                           for (const std::string& part :
                                {std::string(info.param.proto), std::to_string(info.param.nranks) + "ranks",
                                 std::string(launchModeName(info.param.mode)),
                                 "mask" + std::to_string(info.param.mask)}) {
                             name += "_";
                             name += part;
                           }
                           return name;
                         });

// Runs the calls on 2 ranks with `mask`, over the network or not: Coll events, no proxy events.
void expectNoProxyEvents(int mask, bool overNetwork) {
  ScopedEnv env;
  profileWith(env, mask, overNetwork);
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, runCalls));
  std::vector<std::string> problems;
  for (const ProfiledComm& c : profile.comms(&problems)) {
    if (c.ofType(kColl).empty()) problems.push_back("no Coll events: the plugin saw nothing");
    if (!c.ofType(kProxyOp).empty() || !c.ofType(kProxyStep).empty()) problems.push_back("proxy events");
  }
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

// Over shared memory no proxy moves anything: no ProxyOp, whatever the mask.
TEST(ProfilerProxyEvents, NoneOverSharedMemory) { expectNoProxyEvents(0x7fff, false); }

// A mask without the proxy events (Coll only): none over the network either.
TEST(ProfilerProxyEvents, NoneWhenTheMaskDoesNotAskForThem) { expectNoProxyEvents(kColl, true); }

// ProxyCtrl over the network: the proxy thread's moves between working and idle, and its
// sleeps, each a short event without parent; nothing else (the mask asks for nothing else).
TEST(ProfilerProxyEvents, ProxyCtrlTellsTheProxyThreadsActivityAndSleeps) {
  ScopedEnv env;
  profileWith(env, kProxyCtrl, /*overNetwork=*/true);
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, runCalls));
  std::vector<std::string> problems;
  for (const ProfiledComm& c : profile.comms(&problems)) {
    const std::string rank = "rank " + c.init.field("rank") + ": ";
    const std::vector<const ProfiledEvent*> ctrl = c.ofType(kProxyCtrl);
    if (ctrl.size() != c.events.size()) problems.push_back(rank + "events other than ProxyCtrl");
    std::set<int> seen;
    for (const ProfiledEvent* e : ctrl) {
      std::vector<int> states;
      for (const auto& [at, state] : e->states) states.push_back(state);
      const bool shape = states == std::vector<int>{kCtrlIdle} || states == std::vector<int>{kCtrlActive} ||
                         states == std::vector<int>{kCtrlSleep, kCtrlWakeup} ||
                         (states == std::vector<int>{kCtrlSleep} && e == ctrl.back());  // asleep at the destroy
      if (!shape || e->stops != 1 || e->start.field("parent") != "0") problems.push_back(rank + e->start.line);
      seen.insert(states.begin(), states.end());
    }
    // The calls kept the proxy busy, and it went idle between them.
    if (seen.count(kCtrlActive) == 0 || seen.count(kCtrlIdle) == 0)
      problems.push_back(rank + "no Active or no Idle ProxyCtrl event");
  }
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

}  // namespace
}  // namespace chorus_test
