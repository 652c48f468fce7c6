// The tuner's choice, seen through the public API and its TUNING log lines:
// valid for every size and collective, the same on every rank, consistent with
// ncclGroupSimulateEnd; NCCL_PROTO / NCCL_ALGO restrict it; results stay correct.
//
// The full size sweep (0, 1, 2, ..., powers of two ±1 up to 64 MiB, and 4× that
// for AllGather/ReduceScatter, whose tuned size is count × nranks) goes through
// ncclGroupSimulateEnd, which makes the same choice and logs it but runs nothing;
// real calls run at every size up to 4 MiB for AllReduce and a few sizes for the
// others, with a 64 MiB AllReduce as the one large real call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness/collective_case.h"
#include "harness/datatypes.h"
#include "harness/links.h"
#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"
#include "harness/send_recv_case.h"
#include "harness/tuning_log.h"
#include "harness/untouched_buffers.h"
#include "nccl.h"

namespace chorus_test {
namespace {

constexpr int kRanks = 4;

// 0..16, then 2^k - 1, 2^k, 2^k + 1 up to `limit`.
std::vector<size_t> sweepSizes(size_t limit) {
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 16; ++s) sizes.push_back(s);
  for (size_t p = 32; p <= limit; p *= 2) {
    sizes.push_back(p - 1);
    sizes.push_back(p);
    if (p + 1 <= limit) sizes.push_back(p + 1);
  }
  return sizes;
}

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSendRecv };
const char* kindName(Kind kind) {
  static const char* const kNames[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "SendRecv"};
  return kNames[static_cast<int>(kind)];
}
const Kind kAllKinds[] = {Kind::kAllReduce, Kind::kReduceScatter, Kind::kAllGather,
                          Kind::kBroadcast, Kind::kReduce,        Kind::kSendRecv};

// The bytes the tuner sees for `count` int8 elements (NCCL's nBytes).
size_t tunedBytes(Kind kind, size_t count, int nranks) {
  return (kind == Kind::kAllGather || kind == Kind::kReduceScatter) ? count * nranks : count;
}

// Issues one call of `kind` with `count` int8 elements on pointers that are never
// touched (the group is simulated). SendRecv is a send and a receive to the next rank.
ncclResult_t issueUntouched(Kind kind, size_t count, ncclComm_t comm, int rank, int nranks) {
  void* send = untouchedBuffers().send;
  void* recv = untouchedBuffers().recv;
  switch (kind) {
    case Kind::kAllReduce:
      return ncclAllReduce(send, recv, count, ncclInt8, ncclSum, comm, nullptr);
    case Kind::kReduceScatter:
      return ncclReduceScatter(send, recv, count, ncclInt8, ncclSum, comm, nullptr);
    case Kind::kAllGather:
      return ncclAllGather(send, recv, count, ncclInt8, comm, nullptr);
    case Kind::kBroadcast:
      return ncclBroadcast(send, recv, count, ncclInt8, 0, comm, nullptr);
    case Kind::kReduce:
      return ncclReduce(send, recv, count, ncclInt8, ncclSum, 0, comm, nullptr);
    case Kind::kSendRecv: {
      ncclResult_t sent = ncclSend(send, count, ncclInt8, (rank + 1) % nranks, comm, nullptr);
      ncclResult_t received = ncclRecv(recv, count, ncclInt8, (rank + nranks - 1) % nranks, comm, nullptr);
      return sent != ncclSuccess ? sent : received;
    }
  }
  return ncclInternalError;
}

struct SweepCall {
  Kind kind;
  size_t count;  // int8 elements (per rank for AllGather and ReduceScatter)
  size_t bytes;  // what the tuner sees
};

// Every kind at every sweep size up to 64 MiB of count (so AllGather and ReduceScatter
// reach nranks x 64 MiB of tuned bytes).
std::vector<SweepCall> sweepCalls(int nranks) {
  std::vector<SweepCall> calls;
  for (Kind kind : kAllKinds) {
    for (size_t count : sweepSizes(size_t(64) << 20)) calls.push_back({kind, count, tunedBytes(kind, count, nranks)});
  }
  return calls;
}

// Every rank simulates one group per sweep call; returns the estimates.
std::vector<float> simulateSweep(const std::vector<SweepCall>& calls, FailureLog& log, ncclComm_t comm, int rank,
                                 int nranks) {
  std::vector<float> estimates;
  for (const SweepCall& call : calls) {
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    ncclResult_t start = ncclGroupStart();
    ncclResult_t issued = issueUntouched(call.kind, call.count, comm, rank, nranks);
    ncclResult_t end = ncclGroupSimulateEnd(&info);
    if (start != ncclSuccess || issued != ncclSuccess || end != ncclSuccess) {
      log.add(std::string(kindName(call.kind)) + " count " + std::to_string(call.count) + ": GroupStart " +
              resultName(start) + ", call " + resultName(issued) + ", GroupSimulateEnd " + resultName(end));
    }
    estimates.push_back(info.estimatedTime);
  }
  return estimates;
}

bool validAlgo(const TuningChoice& c) {
  if (c.algo == "Ring") return true;
  return c.algo == "Tree" && c.collective == "AllReduce";
}
bool validProto(const TuningChoice& c) { return c.proto == "LL" || c.proto == "LL128" || c.proto == "Simple"; }

// Checks every logged choice and returns them by rank, in log order.
std::map<int, std::vector<TuningChoice>> checkedChoicesByRank(const TuningLogCapture& capture, int nranks) {
  std::map<int, std::vector<TuningChoice>> byRank;
  size_t invalid = 0;
  for (TuningChoice& c : capture.choices()) {
    const bool ok = validAlgo(c) && validProto(c) && std::isfinite(c.timeUs) && c.timeUs > 0;
    if (!ok && ++invalid <= 5) ADD_FAILURE() << "invalid choice: " << c.line;
    byRank[c.rank].push_back(std::move(c));
  }
  EXPECT_EQ(invalid, 0u);
  EXPECT_EQ(byRank.size(), static_cast<size_t>(nranks)) << "ranks that logged choices";
  // Every rank must choose the same for the same call, or their FIFO steps would disagree.
  for (auto& [rank, choices] : byRank) {
    const std::vector<TuningChoice>& first = byRank.begin()->second;
    EXPECT_EQ(choices.size(), first.size()) << "rank " << rank;
    size_t differ = 0;
    for (size_t i = 0; i < std::min(choices.size(), first.size()); ++i) {
      const TuningChoice& a = choices[i];
      const TuningChoice& b = first[i];
      if (std::tie(a.collective, a.bytes, a.algo, a.proto) != std::tie(b.collective, b.bytes, b.algo, b.proto) &&
          ++differ <= 3) {
        ADD_FAILURE() << "rank " << rank << " chose differently from rank " << byRank.begin()->first << ":\n  "
                      << a.line << "\n  " << b.line;
      }
    }
  }
  return byRank;
}

// One logged line per call (two per send/recv pair), naming the call's collective and
// bytes; returns each call's logged time (the sum of its lines).
std::vector<double> expectLinesMatchCalls(const std::vector<TuningChoice>& logged, const std::vector<SweepCall>& calls,
                                          int rank) {
  std::vector<double> times;
  size_t at = 0;
  size_t mismatches = 0;
  for (const SweepCall& call : calls) {
    const int lines = call.kind == Kind::kSendRecv ? 2 : 1;
    double loggedTime = 0;
    for (int l = 0; l < lines; ++l, ++at) {
      if (at >= logged.size()) {
        ADD_FAILURE() << "rank " << rank << ": log ends before the " << kindName(call.kind) << " of " << call.bytes
                      << " bytes";
        return times;
      }
      const TuningChoice& c = logged[at];
      if ((c.collective != kindName(call.kind) || c.bytes != call.bytes) && ++mismatches <= 3) {
        ADD_FAILURE() << "rank " << rank << ": expected a line for " << kindName(call.kind) << " " << call.bytes
                      << " bytes, got " << c.line;
      }
      loggedTime += c.timeUs;
    }
    times.push_back(loggedTime);
  }
  EXPECT_EQ(at, logged.size()) << "rank " << rank << ": more logged lines than calls";
  return times;
}

struct SweepSlice {
  LaunchMode mode;
  int nranks;
};
void PrintTo(const SweepSlice& s, std::ostream* out) { *out << launchModeName(s.mode) << "_" << s.nranks << "ranks"; }

class TuningSweepTest : public testing::TestWithParam<SweepSlice> {};

TEST_P(TuningSweepTest, ChoiceIsValidAndConsistentForEverySize) {
  const SweepSlice slice = GetParam();
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.unset("NCCL_PROTO");
  TuningLogCapture capture(env);
  const std::vector<SweepCall> calls = sweepCalls(slice.nranks);
  std::vector<float> rank0Estimates;  // thread mode only: a child's memory does not come back
  LaunchResult result = runRanks(slice.mode, slice.nranks, [&](const RankContext& context) {
    FailureLog log;
    std::vector<float> estimates = simulateSweep(calls, log, context.comm, context.rank, context.nranks);
    if (context.rank == 0) rank0Estimates = estimates;
    return log.outcome();
  });
  EXPECT_RANKS_OK(result);
  if (!result.allOk()) return;
  std::map<int, std::vector<TuningChoice>> byRank = checkedChoicesByRank(capture, slice.nranks);
  for (const auto& [rank, logged] : byRank) expectLinesMatchCalls(logged, calls, rank);
  const std::vector<double> times = expectLinesMatchCalls(byRank[0], calls, 0);
  ASSERT_EQ(times.size(), calls.size());

  // ncclGroupSimulateEnd reports what the tuner logged for the call (the log rounds to 0.01 us).
  if (slice.mode == LaunchMode::kThreads) {
    ASSERT_EQ(rank0Estimates.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_NEAR(rank0Estimates[i], times[i], 0.02 + 1e-5 * times[i])
          << kindName(calls[i].kind) << " " << calls[i].bytes << " bytes";
    }
  }
  // A bigger call of the same collective is never estimated faster: every term of the
  // model grows with the size, so the cheapest of them does too.
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i].kind == calls[i - 1].kind) {
      EXPECT_GE(times[i] + 0.02, times[i - 1]) << kindName(calls[i].kind) << " " << calls[i].bytes << " bytes";
    }
  }
  // Simple for the smallest and the largest AllReduce: the CPU calibration
  // (tune_constants.h) measured it fastest at every size.
  const TuningChoice* smallest = nullptr;
  const TuningChoice* largest = nullptr;
  for (const TuningChoice& c : byRank[0]) {
    if (c.collective != "AllReduce") continue;
    if (!smallest || c.bytes < smallest->bytes) smallest = &c;
    if (!largest || c.bytes > largest->bytes) largest = &c;
  }
  ASSERT_TRUE(smallest && largest);
  EXPECT_EQ(smallest->proto, "Simple") << smallest->line;
  EXPECT_EQ(largest->proto, "Simple") << largest->line;
}

INSTANTIATE_TEST_SUITE_P(Sizes, TuningSweepTest,
                         testing::Values(SweepSlice{LaunchMode::kThreads, 2}, SweepSlice{LaunchMode::kThreads, 4},
                                         SweepSlice{LaunchMode::kThreads, 8}, SweepSlice{LaunchMode::kProcesses, 3}),
                         [](const testing::TestParamInfo<SweepSlice>& info) {
                           return std::string(launchModeName(info.param.mode)) + "_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

// Real calls, results checked by the harness: AllReduce at every sweep size up to
// 4 MiB and once at 64 MiB, the other collectives and send/recv at a few sizes.
std::vector<CollectiveCase> realCases(int nranks) {
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1;
  std::vector<size_t> allReduceCounts = sweepSizes(size_t(4) << 20);
  allReduceCounts.push_back(size_t(64) << 20);
  for (size_t bytes : allReduceCounts) {
    // int8 for odd byte counts; from 64 KiB on, int32 (counts of 4-byte elements).
    const bool small = bytes < (size_t(64) << 10);
    const ncclDataType_t type = small ? ncclInt8 : ncclInt32;
    cases.push_back({Collective::kAllReduce, type, OpKind::kSum, small ? bytes : bytes / 4, false, 0, seed++});
  }
  for (Collective collective :
       {Collective::kReduceScatter, Collective::kAllGather, Collective::kBroadcast, Collective::kReduce}) {
    for (size_t count : {size_t(0), size_t(1), size_t(1023), size_t(4097), size_t(65537), size_t(1 << 20) + 1}) {
      cases.push_back({collective, ncclFloat32, OpKind::kSum, count, count % 2 == 1, nranks - 1, seed++});
    }
  }
  return cases;
}

const size_t kSendRecvCounts[] = {0, 1, 4095, 65537, (1 << 20) + 1};

// Runs realCases and the send/recv sizes on every rank; returns the calls made by each rank.
LaunchResult runRealCalls(int nranks, const std::vector<CollectiveCase>& cases) {
  return runRanks(LaunchMode::kThreads, nranks, [&](const RankContext& context) {
    FailureLog log;
    CollectiveRankRunner runner(context.rank, context.nranks);
    for (const CollectiveCase& c : cases) runner.run(c, context.comm, log);
    uint64_t seed = 1000;
    for (size_t count : kSendRecvCounts) {
      runSendRecvCase(SendRecvCase{ncclUint8, count, 1, seed++}, context.comm, context.rank, context.nranks, log);
    }
    return log.outcome();
  });
}

TEST(Tuning, RealCallsAtEverySizeAreCorrectAndLogValidChoices) {
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.unset("NCCL_PROTO");
  TuningLogCapture capture(env);
  const std::vector<CollectiveCase> cases = realCases(kRanks);
  EXPECT_RANKS_OK(runRealCalls(kRanks, cases));
  std::map<int, std::vector<TuningChoice>> byRank = checkedChoicesByRank(capture, kRanks);
  const std::vector<TuningChoice>& logged = byRank[0];
  // One line per collective call (naming its collective and tuned bytes), two per send/recv.
  ASSERT_EQ(logged.size(), cases.size() + 2 * std::size(kSendRecvCounts));
  for (size_t i = 0; i < cases.size(); ++i) {
    const CollectiveCase& c = cases[i];
    const bool perRank = c.collective == Collective::kAllGather || c.collective == Collective::kReduceScatter;
    EXPECT_EQ(logged[i].collective, collectiveName(c.collective)) << logged[i].line;
    EXPECT_EQ(logged[i].bytes, c.count * traitsOf(c.type).size * (perRank ? kRanks : 1)) << logged[i].line;
  }
}

// The calibrated model picks Simple wherever it may, so excluding Simple is the setting
// that changes choices: no call may use it.
TEST(Tuning, ProtoExcludingSimpleNeverUsesSimple) {
  ScopedEnv env;
  env.unset("NCCL_ALGO");
  env.set("NCCL_PROTO", "^Simple");
  TuningLogCapture capture(env);
  const std::vector<CollectiveCase> cases = realCases(kRanks);
  const std::vector<SweepCall> simulated = sweepCalls(kRanks);
  LaunchResult result = runRanks(LaunchMode::kThreads, kRanks, [&](const RankContext& context) {
    FailureLog log;
    simulateSweep(simulated, log, context.comm, context.rank, context.nranks);
    CollectiveRankRunner runner(context.rank, context.nranks);
    for (const CollectiveCase& c : cases) {
      if (c.count <= (size_t(1) << 20) + 1) runner.run(c, context.comm, log);  // not the 64 MiB one: simulated
    }
    return log.outcome();
  });
  EXPECT_RANKS_OK(result);
  size_t lines = 0;
  std::set<std::string> used;
  for (const std::string& line : capture.lines()) {
    EXPECT_EQ(line.find("proto Simple "), std::string::npos) << line;
    TuningChoice c;
    if (parseTuningChoice(line, &c)) {
      ++lines;
      used.insert(c.proto);
    }
  }
  EXPECT_GT(lines, simulated.size());
  // ^Simple excludes only Simple: the model picks among LL and LL128.
  EXPECT_FALSE(used.empty());
  EXPECT_EQ(used.count("Simple"), 0u);
  checkedChoicesByRank(capture, kRanks);
}

TEST(Tuning, AlgoTreeStillRunsReduceScatterOnRing) {
  ScopedEnv env;
  env.set("NCCL_ALGO", "Tree");
  env.unset("NCCL_PROTO");
  TuningLogCapture capture(env);
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1;
  for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(65537), size_t(1 << 20) + 1}) {
    for (Collective collective : {Collective::kReduceScatter, Collective::kAllReduce, Collective::kAllGather,
                                  Collective::kBroadcast, Collective::kReduce}) {
      cases.push_back({collective, ncclInt32, OpKind::kSum, count, false, 1, seed++});
    }
  }
  LaunchResult result = runRanks(LaunchMode::kThreads, kRanks, [&](const RankContext& context) {
    FailureLog log;
    CollectiveRankRunner runner(context.rank, context.nranks);
    for (const CollectiveCase& c : cases) runner.run(c, context.comm, log);
    return log.outcome();
  });
  EXPECT_RANKS_OK(result);
  size_t reduceScatterLines = 0, allReduceLines = 0;
  for (const TuningChoice& c : capture.choices()) {
    if (c.collective == "AllReduce") {
      ++allReduceLines;
      EXPECT_EQ(c.algo, "Tree") << c.line;
    } else {
      reduceScatterLines += c.collective == "ReduceScatter";
      EXPECT_EQ(c.algo, "Ring") << c.line;
    }
  }
  EXPECT_EQ(reduceScatterLines, 5u * kRanks);
  EXPECT_EQ(allReduceLines, 5u * kRanks);
  bool warned = false;
  for (const std::string& line : capture.lines()) {
    warned |= line.find("NCCL WARN") != std::string::npos && line.find("NCCL_ALGO=Tree") != std::string::npos &&
              line.find("ReduceScatter") != std::string::npos;
  }
  EXPECT_TRUE(warned) << "no WARN naming NCCL_ALGO=Tree and ReduceScatter";
}

// ncclGroupSimulateEnd: estimates a group of AllReduce calls and runs none of them.
RankOutcome simulateOnRank(ncclComm_t comm) {
  FailureLog log;
  const size_t counts[] = {2, 256, 16384, 1 << 20, 4 << 20};  // float32: 8 B .. 16 MiB
  std::vector<float> send(counts[4], 1.0f);
  std::vector<float> recv(counts[4] + 16, -7.0f);
  const std::vector<float> untouched = recv;
  auto simulate = [&](size_t count, int calls, ncclSimInfo_t* info) -> ncclResult_t {
    if (ncclGroupStart() != ncclSuccess) log.add("ncclGroupStart failed");
    for (int i = 0; i < calls; ++i) {
      ncclResult_t r = ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr);
      if (r != ncclSuccess) log.add("ncclAllReduce in a simulated group returned " + resultName(r));
    }
    return info ? ncclGroupSimulateEnd(info) : ncclGroupSimulateEnd(nullptr);
  };

  float previous = 0;
  for (size_t count : counts) {
    ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
    ncclResult_t r = simulate(count, 1, &info);
    if (r != ncclSuccess) log.add("ncclGroupSimulateEnd returned " + resultName(r));
    if (!(info.estimatedTime > previous)) {
      log.add("estimate for " + std::to_string(count * 4) + " bytes is " + std::to_string(info.estimatedTime) +
              " us, not more than the smaller call's " + std::to_string(previous) + " us");
    }
    previous = info.estimatedTime;
    ncclSimInfo_t two = NCCL_SIM_INFO_INITIALIZER;
    if (simulate(count, 2, &two) != ncclSuccess || !(two.estimatedTime > info.estimatedTime)) {
      log.add("two AllReduce calls of " + std::to_string(count * 4) + " bytes estimated at " +
              std::to_string(two.estimatedTime) + " us, one at " + std::to_string(info.estimatedTime) + " us");
    }
  }
  if (recv != untouched) log.add("a simulated AllReduce wrote the receive buffer");

  // As NCCL: an uninitialised or too small simInfo fails with ncclInvalidArgument and
  // closes the group, dropping its work (a later call runs as itself, not into that group).
  ncclSimInfo_t garbage;
  std::memset(&garbage, 0x3C, sizeof(garbage));
  ncclSimInfo_t tooSmall = NCCL_SIM_INFO_INITIALIZER;
  tooSmall.size = sizeof(size_t);
  int nranks = 0;
  ncclCommCount(comm, &nranks);
  auto sumIsRanks = [&](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == static_cast<float>(nranks); });
  };
  for (ncclSimInfo_t* bad : {&garbage, &tooSmall}) {
    if (ncclGroupStart() != ncclSuccess) log.add("ncclGroupStart failed");
    ncclAllReduce(send.data(), recv.data(), counts[1], ncclFloat32, ncclSum, comm, nullptr);
    const ncclResult_t r = ncclGroupSimulateEnd(bad);
    if (r != ncclInvalidArgument)
      log.add(std::string("ncclGroupSimulateEnd(") + (bad == &garbage ? "garbage" : "size 8") + ") returned " +
              resultName(r));
    std::vector<float> lone(counts[1], 0.0f);
    const ncclResult_t after = ncclAllReduce(send.data(), lone.data(), counts[1], ncclFloat32, ncclSum, comm, nullptr);
    if (after != ncclSuccess || !sumIsRanks(lone))
      log.add("an AllReduce after a rejected simInfo returned " + resultName(after) + " and did not sum");
  }
  // A nested one closes its level only; the outermost simulates.
  if (ncclGroupStart() != ncclSuccess || ncclGroupStart() != ncclSuccess) log.add("ncclGroupStart failed");
  ncclAllReduce(send.data(), recv.data(), counts[1], ncclFloat32, ncclSum, comm, nullptr);
  ncclSimInfo_t inner = NCCL_SIM_INFO_INITIALIZER, outer = NCCL_SIM_INFO_INITIALIZER;
  const ncclResult_t innerResult = ncclGroupSimulateEnd(&inner);
  const ncclResult_t outerResult = ncclGroupSimulateEnd(&outer);
  if (innerResult != ncclSuccess || outerResult != ncclSuccess || !(outer.estimatedTime > 0))
    log.add("nested ncclGroupSimulateEnd returned " + resultName(innerResult) + ", then " + resultName(outerResult) +
            " with an estimate of " + std::to_string(outer.estimatedTime) + " us");
  if (recv != untouched) log.add("an AllReduce of a rejected or simulated group ran");
  // A NULL simInfo is a plain ncclGroupEnd: the group runs.
  std::vector<float> ran(counts[1], 0.0f);
  if (ncclGroupStart() != ncclSuccess) log.add("ncclGroupStart failed");
  ncclAllReduce(send.data(), ran.data(), counts[1], ncclFloat32, ncclSum, comm, nullptr);
  const ncclResult_t nullResult = ncclGroupSimulateEnd(nullptr);
  if (nullResult != ncclSuccess || !sumIsRanks(ran))
    log.add("ncclGroupSimulateEnd(NULL) returned " + resultName(nullResult) + " and did not run the group");
  // Outside any group there is nothing to end.
  ncclSimInfo_t outside = NCCL_SIM_INFO_INITIALIZER;
  ncclResult_t outsideResult = ncclGroupSimulateEnd(&outside);
  if (outsideResult == ncclSuccess) log.add("ncclGroupSimulateEnd outside a group returned ncclSuccess");

  // The communicator still works, and the simulated calls did not linger in it.
  std::vector<float> sum(counts[1], 0.0f);
  ncclResult_t real = ncclAllReduce(send.data(), sum.data(), counts[1], ncclFloat32, ncclSum, comm, nullptr);
  if (real != ncclSuccess) log.add("a real AllReduce after simulating returned " + resultName(real));
  for (float v : sum) {
    if (v != static_cast<float>(nranks)) {
      log.add("a real AllReduce after simulating gave " + std::to_string(v));
      break;
    }
  }
  if (recv != untouched) log.add("a simulated AllReduce ran with the next real call");
  return log.outcome();
}

TEST(Tuning, GroupSimulateEndEstimatesAndRunsNothing) {
  EXPECT_RANKS_OK(
      runRanks(LaunchMode::kThreads, 2, [](const RankContext& context) { return simulateOnRank(context.comm); }));
}

// The model's hop is the communicator's slowest link: over the network (even between
// processes of one host, shared memory disabled) it prices an 8-byte AllReduce at tens of
// microseconds, over shared memory at about one; every rank prices it alike.
double predicted8ByteAllReduceUs(Link link) {
  ScopedEnv env;
  forceLink(env, link);
  TuningLogCapture log(env);
  const LaunchResult result = runRanks(LaunchMode::kProcesses, 2, [](const RankContext& context) {
    float values[2] = {1.0f, 1.0f};  // 8 bytes
    const ncclResult_t r = ncclAllReduce(values, values, 2, ncclFloat32, ncclSum, context.comm, nullptr);
    return r == ncclSuccess ? RankOutcome::pass() : RankOutcome::fail("AllReduce: " + resultName(r));
  });
  EXPECT_RANKS_OK(result);
  std::set<double> times;
  for (const TuningChoice& c : log.choices())
    if (c.collective == "AllReduce" && c.bytes == 8) times.insert(c.timeUs);
  EXPECT_EQ(times.size(), 1u) << "both ranks log one prediction for the 8-byte AllReduce";
  return times.empty() ? 0 : *times.begin();
}

TEST(Tuning, NetworkHopsArePricedAsNetworkHops) {
  const double shm = predicted8ByteAllReduceUs(Link::kShm);
  const double net = predicted8ByteAllReduceUs(Link::kNet);
  EXPECT_GT(shm, 0);
  EXPECT_LT(shm, 5.0);
  EXPECT_GT(net, 10 * shm);
}

}  // namespace
}  // namespace chorus_test
