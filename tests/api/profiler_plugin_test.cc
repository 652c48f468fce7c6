// Profiler plugins through the public API, loaded as NCCL loads them (NCCL_PROFILER_PLUGIN
// naming a test plugin of tests/plugins by path): the events that one group (AllReduce,
// Send, Recv) and one lone AllReduce produce, on threads and processes, through the v7, v6,
// v5 and v4 tables: init and finalize once per communicator, one Group event per launch with
// the calls' events inside it, the parents NCCL gives, the calls' fields (v7: the user tag
// of an nccl*Config call), a KernelCh event per channel each call ran on; which events an
// activation mask lets through, and a mask changed at run time. The results are checked too: profiling changes nothing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "harness/profiler_log.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// NCCL's event type bits (ncclProfile*).
constexpr int kGroup = 1 << 0, kColl = 1 << 1, kP2p = 1 << 2, kProxyOp = 1 << 3, kProxyCtrl = 1 << 5;
constexpr int kKernelCh = 1 << 6;
constexpr int kGroupApi = 1 << 8, kCollApi = 1 << 9, kP2pApi = 1 << 10;
// recordEventState's GroupApi states, and a kernel channel's end.
constexpr int kGroupStartApiStop = 23, kGroupEndApiStart = 24, kKernelChStop = 22;

constexpr size_t kGroupedCount = 1024;   // the grouped AllReduce, in place
constexpr size_t kP2pCount = 300;        // each Send and Recv
constexpr size_t kLoneCount = 7;         // the lone AllReduce, out of place, through ncclAllReduceConfig
constexpr uint64_t kUserTag = 0xc0ffee;  // its config's userProfilerTag
constexpr const char* kCommName = "profiled";

std::string pluginPath(const char* file) { return std::string(CHORUS_TEST_PROFILER_PLUGIN_DIR) + "/" + file; }

// Every rank: a group of an in-place AllReduce (float), a Send to the next rank and a Recv
// from the previous one (int32); then a lone out-of-place AllReduce (double) with a user
// profiler tag. Checks results.
RankOutcome runProfiledCalls(int rank, int nranks, const ncclUniqueId& id) {
  FailureLog log;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = kCommName;
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config); r != ncclSuccess)
    return RankOutcome::fail("ncclCommInitRankConfig returned " + resultName(r));
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  std::vector<float> values(kGroupedCount, static_cast<float>(rank + 1));
  std::vector<int32_t> sent(kP2pCount), received(kP2pCount, -1);
  for (size_t i = 0; i < kP2pCount; ++i) sent[i] = rank * 1000 + static_cast<int32_t>(i);
  ncclGroupStart();
  ncclAllReduce(values.data(), values.data(), kGroupedCount, ncclFloat32, ncclSum, comm, nullptr);
  ncclSend(sent.data(), kP2pCount, ncclInt32, next, comm, nullptr);
  ncclRecv(received.data(), kP2pCount, ncclInt32, prev, comm, nullptr);
  if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) log.add("ncclGroupEnd returned " + resultName(r));
  const float sum = static_cast<float>(nranks * (nranks + 1) / 2);
  if (std::any_of(values.begin(), values.end(), [&](float v) { return v != sum; }))
    log.add("grouped AllReduce: expected " + std::to_string(sum) + " everywhere");
  for (size_t i = 0; i < kP2pCount; ++i) {
    if (received[i] != prev * 1000 + static_cast<int32_t>(i)) {
      log.add("Recv: element " + std::to_string(i) + " is " + std::to_string(received[i]));
      break;
    }
  }
  std::vector<double> in(kLoneCount, rank), out(kLoneCount, -1);
  ncclCollConfig_t tagged = NCCL_COLLCONFIG_INITIALIZER;
  tagged.userProfilerTag = kUserTag;
  if (ncclResult_t r =
          ncclAllReduceConfig(in.data(), out.data(), kLoneCount, ncclFloat64, ncclSum, comm, nullptr, &tagged);
      r != ncclSuccess)
    log.add("lone AllReduce returned " + resultName(r));
  if (std::any_of(out.begin(), out.end(), [&](double v) { return v != nranks * (nranks - 1) / 2; }))
    log.add("lone AllReduce: wrong sum");
  if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) log.add("ncclCommDestroy returned " + resultName(r));
  return log.outcome();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// Each communicator's init: one per rank, the same hash, finalized once.
void checkInits(const std::vector<ProfiledComm>& comms, int nranks, int version, std::vector<std::string>* problems) {
  std::multiset<long long> ranks;
  for (const ProfiledComm& c : comms) {
    const ProfilerRecord& init = c.init;
    ranks.insert(init.number("rank"));
    if (init.number("version") != version) problems->push_back("version: " + init.line);
    if (init.field("commName") != kCommName || init.number("nranks") != nranks || init.number("nNodes") != 1)
      problems->push_back("init fields: " + init.line);
    if (init.field("commHash") != comms[0].init.field("commHash") || init.field("commHash") == "0x0")
      problems->push_back("commHash differs between ranks or is 0: " + init.line);
    if (c.finalizes != 1) problems->push_back(std::to_string(c.finalizes) + " finalizes for " + init.line);
  }
  for (int r = 0; r < nranks; ++r)
    if (ranks.count(r) != 1)
      problems->push_back(std::to_string(ranks.count(r)) + " inits of rank " + std::to_string(r));
  if (ranks.size() != static_cast<size_t>(nranks)) problems->push_back(std::to_string(ranks.size()) + " inits");
}

// The first event of `type` whose field `key` is `value`.
const ProfiledEvent* find(const ProfiledComm& c, int type, const std::string& key, const std::string& value) {
  for (const ProfiledEvent* e : c.ofType(type))
    if (e->start.field(key) == value) return e;
  return nullptr;
}

bool inside(const ProfiledEvent& inner, const ProfiledEvent& outer) {
  return outer.startAt < inner.startAt && inner.stopAt < outer.stopAt && outer.stopAt != std::string::npos;
}

struct EventsCase {
  const char* plugin;  // file in CHORUS_TEST_PROFILER_PLUGIN_DIR
  int version;         // the table the loader must take
  LaunchMode mode;
  int nranks;
  const char* algo = nullptr;   // NCCL_ALGO and NCCL_PROTO (null: the tuner's choice), and their names in
  const char* proto = nullptr;  // the events
  const char* algoName = nullptr;
  const char* protoName = nullptr;
};

// The events of one rank for runProfiledCalls, through a table of `version`, with two
// channels (NCCL_MIN_NCHANNELS=2).
void checkEvents(const ProfiledComm& c, const EventsCase& p, std::vector<std::string>* problems) {
  const int nranks = p.nranks, version = p.version;
  const int rank = static_cast<int>(c.init.number("rank"));
  auto fail = [&](const std::string& what) { problems->push_back("rank " + std::to_string(rank) + ": " + what); };
  for (const ProfiledEvent& e : c.events) {
    if (e.stops != 1 || e.stopAt == std::string::npos || e.stopAt < e.startAt)
      fail(std::to_string(e.stops) + " stops, or a stop before the start: " + e.start.line);
    if (e.start.number("rank") != rank) fail("rank field: " + e.start.line);
  }
  const std::vector<const ProfiledEvent*> groups = c.ofType(kGroup);
  const std::vector<const ProfiledEvent*> colls = c.ofType(kColl);
  const std::vector<const ProfiledEvent*> p2ps = c.ofType(kP2p);
  const size_t apiEvents = version >= 5 ? 6 : 0;
  const size_t channelEvents = 2 + 1 + 1 + 1;  // the grouped AllReduce's two channels, the rest one each
  if (groups.size() != 2 || colls.size() != 2 || p2ps.size() != 2 || c.events.size() != 6 + apiEvents + channelEvents) {
    fail(std::to_string(c.events.size()) + " events: " + std::to_string(groups.size()) + " Group, " +
         std::to_string(colls.size()) + " Coll, " + std::to_string(p2ps.size()) + " P2p, " +
         std::to_string(c.ofType(kKernelCh).size()) + " KernelCh");
    return;
  }
  const ProfiledEvent* grouped = find(c, kColl, "count", std::to_string(kGroupedCount));
  const ProfiledEvent* lone = find(c, kColl, "count", std::to_string(kLoneCount));
  const ProfiledEvent* send = find(c, kP2p, "func", "Send");
  const ProfiledEvent* recv = find(c, kP2p, "func", "Recv");
  if (!grouped || !lone || !send || !recv) return fail("a call's event is missing");
  // The fields of the calls.
  const std::set<std::string> algos =
      p.algoName ? std::set<std::string>{p.algoName} : std::set<std::string>{"RING", "TREE"};
  const std::set<std::string> protos =
      p.protoName ? std::set<std::string>{p.protoName} : std::set<std::string>{"LL", "LL128", "SIMPLE"};
  for (const ProfiledEvent* e : {grouped, lone}) {
    const ProfilerRecord& s = e->start;
    if (s.field("func") != "AllReduce" || s.number("root") != 0 || algos.count(s.field("algo")) == 0 ||
        protos.count(s.field("proto")) == 0)
      fail("coll fields: " + s.line);
  }
  // The channels that got a share: 1024 elements fill both, 7 only the first.
  if (grouped->start.number("nChannels") != 2 || lone->start.number("nChannels") != 1)
    fail("nChannels: " + grouped->start.line + " / " + lone->start.line);
  if (grouped->start.field("datatype") != "ncclFloat32" || grouped->start.number("seq") != 0 ||
      grouped->start.field("sendBuff") != grouped->start.field("recvBuff"))
    fail("the grouped AllReduce (in place, first): " + grouped->start.line);
  if (lone->start.field("datatype") != "ncclFloat64" || lone->start.number("seq") != 1 ||
      lone->start.field("sendBuff") == lone->start.field("recvBuff"))
    fail("the lone AllReduce (out of place, second): " + lone->start.line);
  for (const auto& [e, peer] : {std::pair{send, (rank + 1) % nranks}, std::pair{recv, (rank + nranks - 1) % nranks}}) {
    const ProfilerRecord& s = e->start;
    if (s.number("count") != static_cast<long long>(kP2pCount) || s.field("datatype") != "ncclInt32" ||
        s.number("peer") != peer || s.number("nChannels") != 1)
      fail("p2p fields: " + s.line);
  }
  // One Group event per launch, the calls' events inside it.
  const ProfiledEvent* groupOf[] = {groups[0], groups[0], groups[0], groups[1]};
  const ProfiledEvent* calls[] = {grouped, send, recv, lone};
  for (int i = 0; i < 4; ++i) {
    if (!inside(*calls[i], *groupOf[i])) fail("not inside its Group event: " + calls[i]->start.line);
    // v5 and v6 name the group in parentGroup; v4 makes it the parent.
    const std::string groupLink = calls[i]->start.field(version >= 5 ? "parentGroup" : "parent");
    if (groupLink != groupOf[i]->id) fail("group link " + groupLink + " is not " + groupOf[i]->id);
  }
  // Each call's KernelCh events: one per channel it ran on, ids from 0, inside the call's
  // event; the KernelChStop state before the stop, its time not before the start's.
  for (const ProfiledEvent* call : {grouped, send, recv, lone}) {
    std::set<long long> channels;
    for (const ProfiledEvent* ch : c.ofType(kKernelCh)) {
      if (ch->start.field("parent") != call->id) continue;
      channels.insert(ch->start.number("channelId"));
      if (!inside(*ch, *call)) fail("KernelCh outside its call: " + ch->start.line);
      const bool stopState =
          ch->states.size() == 1 && ch->states[0].second == kKernelChStop && ch->states[0].first < ch->stopAt &&
          ch->stateRecords[0].number("pTimer") >= ch->start.number("pTimer") && ch->start.number("pTimer") > 0;
      if (!stopState) fail("KernelCh state and times: " + ch->start.line);
    }
    std::set<long long> expected;
    for (long long i = 0; i < call->start.number("nChannels"); ++i) expected.insert(i);
    if (channels != expected) fail("KernelCh channels of " + call->start.line);
  }
  // v7: the user tag of the call's config, on its API and launch events; 0 without one.
  for (const ProfiledEvent* e : {grouped, send, recv, lone}) {
    const std::string expected = version < 7 ? "" : e == lone ? "0xc0ffee" : "0x0";
    if (e->start.field("userTag") != expected) fail("userTag (expected '" + expected + "'): " + e->start.line);
  }
  if (version < 5) return;
  // v5 and v6: the API events, their parents and states.
  const std::vector<const ProfiledEvent*> groupApis = c.ofType(kGroupApi);
  if (groupApis.size() != 2 || c.ofType(kCollApi).size() != 2 || c.ofType(kP2pApi).size() != 2)
    return fail("API events: " + std::to_string(groupApis.size()) + " GroupApi");
  const ProfiledEvent* groupApiOf[] = {groupApis[0], groupApis[0], groupApis[0], groupApis[1]};
  if (groupApis[0]->start.number("groupDepth") != 2 || groupApis[1]->start.number("groupDepth") != 1)
    fail("groupDepth: the user's group is 2, a lone call's 1");
  for (int i = 0; i < 4; ++i) {
    const ProfiledEvent* api = c.byId(calls[i]->start.field("parent"));
    const int apiType = calls[i]->type == kColl ? kCollApi : kP2pApi;
    if (api == nullptr || api->type != apiType || api->start.field("func") != calls[i]->start.field("func") ||
        api->start.field("count") != calls[i]->start.field("count")) {
      fail("parent is not the call's API event: " + calls[i]->start.line);
      continue;
    }
    if (api->start.field("userTag") != calls[i]->start.field("userTag"))
      fail("API event's userTag: " + api->start.line);
    if (api->start.field("parent") != groupApiOf[i]->id)
      fail("API event's parent is not its GroupApi: " + api->start.line);
    if (api->stopAt > calls[i]->startAt)
      fail("the API event ends with the call, before the launch: " + api->start.line);
    if (!inside(*groupOf[i], *groupApiOf[i])) fail("Group event outside its GroupApi: " + groupOf[i]->start.line);
  }
  for (const ProfiledEvent* api : groupApis) {
    const auto& st = api->states;
    if (st.size() != 2 || st[0].second != kGroupStartApiStop || st[1].second != kGroupEndApiStart ||
        st[0].first < api->startAt || st[1].first > api->stopAt)
      fail("GroupApi states: " + api->start.line);
  }
}

class ProfilerEventsTest : public testing::TestWithParam<EventsCase> {};

TEST_P(ProfilerEventsTest, OneGroupAndOneLoneCall) {
  const EventsCase& p = GetParam();
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", pluginPath(p.plugin));
  env.unset("CHORUS_TEST_PROFILER_MASK");  // every event
  env.set("NCCL_MIN_NCHANNELS", "2");
  env.set("CHORUS_BOARD", "0");  // the board would run the small grouped AllReduce whole on channel 0
  if (p.algo) env.set("NCCL_ALGO", p.algo);
  if (p.proto) env.set("NCCL_PROTO", p.proto);
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(p.mode, p.nranks, runProfiledCalls));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  checkInits(comms, p.nranks, p.version, &problems);
  for (const ProfiledComm& c : comms) checkEvents(c, p, &problems);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

INSTANTIATE_TEST_SUITE_P(Abi, ProfilerEventsTest,
                         testing::Values(EventsCase{"libnccl-profiler-chorustest.so", 7, LaunchMode::kThreads, 2,
                                                    "Tree", "LL", "TREE", "LL"},
                                         EventsCase{"libnccl-profiler-chorustest.so", 7, LaunchMode::kProcesses, 4},
                                         EventsCase{"libnccl-profiler-chorustest6.so", 6, LaunchMode::kProcesses, 3,
                                                    "Ring", "LL128", "RING", "LL128"},
                                         EventsCase{"libnccl-profiler-chorustest5.so", 5, LaunchMode::kThreads, 2},
                                         EventsCase{"libnccl-profiler-chorustest4.so", 4, LaunchMode::kThreads, 3},
                                         EventsCase{"libnccl-profiler-chorustest4.so", 4, LaunchMode::kProcesses, 2}),
                         [](const testing::TestParamInfo<EventsCase>& info) {
                           std::string name = "V";  // appended: GCC 12 misreads "V" + std::string (-Wrestrict)
                           name += std::to_string(info.param.version);
                           name += std::string("_") + launchModeName(info.param.mode) + "_";
                           name += std::to_string(info.param.nranks) + "ranks";
                           return name;
                         });

struct MaskCase {
  int mask;
  int emitted;  // the event types that must appear (each type's events all of them); no other
};

class ProfilerMaskTest : public testing::TestWithParam<MaskCase> {};

TEST_P(ProfilerMaskTest, OnlyWantedEventsAndTheirParentsStart) {
  const MaskCase& p = GetParam();
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", pluginPath("libnccl-profiler-chorustest.so"));
  env.set("CHORUS_TEST_PROFILER_MASK", std::to_string(p.mask));
  env.set("NCCL_MIN_NCHANNELS", "2");  // the grouped AllReduce on two channels: five KernelCh in all
  env.set("CHORUS_BOARD", "0");        // (on the board it would run on channel 0 alone)
  ProfilerLog profile(env);
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kThreads, 2, runProfiledCalls));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  checkInits(comms, 2, 7, &problems);
  for (const ProfiledComm& c : comms) {
    for (int type : {kGroup, kColl, kP2p, kGroupApi, kCollApi, kP2pApi, kKernelCh}) {
      // Two of each (see runProfiledCalls); KernelCh: one per channel of the four calls.
      const size_t expected = (p.emitted & type) == 0 ? 0 : type == kKernelCh ? 5 : 2;
      if (c.ofType(type).size() != expected)
        problems.push_back("rank " + c.init.field("rank") + ": " + std::to_string(c.ofType(type).size()) +
                           " events of type " + std::to_string(type) + ", expected " + std::to_string(expected));
    }
    size_t total = 0;
    for (int type : {kGroup, kColl, kP2p, kGroupApi, kCollApi, kP2pApi, kKernelCh}) total += c.ofType(type).size();
    if (total != c.events.size()) problems.push_back("an event of a type Chorus does not emit");
  }
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

constexpr int kAll = kGroup | kColl | kP2p | kGroupApi | kCollApi | kP2pApi;
INSTANTIATE_TEST_SUITE_P(Masks, ProfilerMaskTest,
                         testing::Values(MaskCase{0, 0}, MaskCase{kProxyCtrl, 0},
                                         MaskCase{kColl, kGroupApi | kCollApi | kGroup | kColl},
                                         MaskCase{kP2p, kGroupApi | kP2pApi | kGroup | kP2p},
                                         MaskCase{kGroup, kGroupApi | kGroup}, MaskCase{kCollApi, kGroupApi | kCollApi},
                                         MaskCase{kP2pApi, kGroupApi | kP2pApi}, MaskCase{kGroupApi, kGroupApi},
                                         // ProxyOp is below Coll and P2p: NCCL starts its parents.
                                         MaskCase{kProxyOp, kAll},
                                         // So is KernelCh, which Chorus emits too.
                                         MaskCase{kKernelCh, kAll | kKernelCh},
                                         MaskCase{kColl | kKernelCh, kAll | kKernelCh}),
                         [](const testing::TestParamInfo<MaskCase>& info) {
                           return "Mask0x" + [](int v) {
                             char buf[16];
                             snprintf(buf, sizeof(buf), "%x", v);
                             return std::string(buf);
                           }(info.param.mask);
                         });

// A plugin may change its mask at run time through the pointer its init got: calls made
// while the mask is 0 start nothing, and the collectives' sequence numbers still count them.
TEST(ProfilerMaskChange, TakesEffectAtTheNextCallAndSequenceNumbersCountEveryCall) {
  const std::string path = pluginPath("libnccl-profiler-chorustest.so");
  ScopedEnv env;
  env.set("NCCL_PROFILER_PLUGIN", path);
  env.unset("CHORUS_TEST_PROFILER_MASK");
  ProfilerLog profile(env);
  // Processes: each rank has the mask of its own process to change.
  EXPECT_RANKS_OK(runRanksWithId(LaunchMode::kProcesses, 2, [&path](int rank, int nranks, const ncclUniqueId& id) {
    FailureLog log;
    ncclComm_t comm = nullptr;
    if (ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank); r != ncclSuccess)
      return RankOutcome::fail("ncclCommInitRank returned " + resultName(r));
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // the plugin the init loaded
    auto setMask = library ? reinterpret_cast<void (*)(int)>(dlsym(library, "chorusTestProfilerSetMask")) : nullptr;
    if (setMask == nullptr) log.add("the plugin is not loaded, or lacks chorusTestProfilerSetMask");
    for (int call = 0; call < 3 && setMask != nullptr; ++call) {
      if (call == 1) setMask(0);
      if (call == 2) setMask(kColl);
      int32_t value = rank + 1;
      ncclAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, nullptr);
      if (value != nranks * (nranks + 1) / 2)
        log.add("AllReduce " + std::to_string(call) + ": " + std::to_string(value));
    }
    if (library != nullptr) dlclose(library);
    if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) log.add("ncclCommDestroy returned " + resultName(r));
    return log.outcome();
  }));
  std::vector<std::string> problems;
  const std::vector<ProfiledComm> comms = profile.comms(&problems);
  EXPECT_EQ(comms.size(), 2u);
  for (const ProfiledComm& c : comms) {
    const std::vector<const ProfiledEvent*> colls = c.ofType(kColl);
    if (colls.size() != 2 || colls[0]->start.number("seq") != 0 || colls[1]->start.number("seq") != 2)
      problems.push_back("rank " + c.init.field("rank") +
                         ": expected the Coll events of calls 0 and 2 (seq 0, 2), got " + std::to_string(colls.size()));
    if (c.ofType(kGroup).size() != 2 || c.ofType(kGroupApi).size() != 2 || c.ofType(kCollApi).size() != 2)
      problems.push_back("rank " + c.init.field("rank") + ": the call made under mask 0 started an event");
  }
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

}  // namespace
}  // namespace chorus_test
