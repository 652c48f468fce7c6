// Every collective and send/recv on every protocol (Simple, LL, LL128), AllReduce
// also on the tree, at element counts on both sides of every slot, channel, ring
// round and FIFO boundary, on 2, 3, 4, 5 and 8 ranks, as threads and as processes
// (Boundaries), from one thread driving all ranks (OneThread), under unusual FIFO
// settings (EdgeSettings), and with buffers at odd addresses (Unaligned).
//
// The FIFOs are shrunk (protocol_settings.h) so that the boundaries fall at small
// counts; the slot payloads are computed from NCCL's buffer layout, independently
// of the library. Half the slices run two channels (both trees of the double
// binary tree; each call split in two), half run NCCL_STEPS=4, so slot counts,
// channel splits and the default 8 steps are all crossed with every rank count.
//
// One TEST per (launch mode, nranks, algorithm, protocol): one communicator runs
// 150 to 1700 calls, each count with every type of kTypeOps. Every slice also logs
// its tuning choices and init lines (NCCL_DEBUG_SUBSYS=TUNING,INIT, a file per
// process) and checks, call by call, that the forced algorithm and protocol were
// the ones used, and that the communicator has the channels asked for.
// All 109 tests take about 15 s of CPU on 2 cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "harness/collective_case.h"
#include "harness/datatypes.h"
#include "harness/links.h"
#include "harness/protocol_settings.h"
#include "harness/rank_launcher.h"
#include "harness/send_recv_case.h"
#include "harness/tuning_log.h"
#include "harness/unaligned_case.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// Unusual FIFO settings, each run on a few slices of its own: buffers that are no
// multiple of the line or of the slot count (NCCL hangs when an LL128 buffer is not
// a multiple of its line), the extreme slot counts, and odd or many channels (trees
// unevenly shared; shares of a few elements).
struct EdgeSettings {
  const char* name;
  FifoSettings fifo;
};
const EdgeSettings kEdgeSettings[] = {
    {"OddBuffers", {8, 1, 100000, 3000, 10000}},    {"TwoSteps", {2, 2, 65536, 16384, 16384}},
    {"SixteenSteps", {16, 1, 65536, 16384, 16384}}, {"ThreeChannels", {8, 3, 65536, 16384, 16384}},
    {"EightChannels", {4, 8, 65536, 16384, 16384}},
};

struct ProtocolSlice {
  LaunchMode mode;
  int nranks;
  Algo algo;
  Proto proto;
  int edge = -1;           // index in kEdgeSettings; -1: the standard settings of fifoSettingsFor
  bool oneThread = false;  // one thread drives every rank of ncclCommInitAll, in groups (mode unused)
  bool net = false;        // processes forced onto the network transport (P2P and SHM disabled)
};

std::string describeSlice(const ProtocolSlice& s) {
  std::string name = std::string(s.oneThread ? "InitAllOneThread"
                                 : s.net     ? "NetProcesses"
                                             : launchModeName(s.mode)) +
                     "_" + std::to_string(s.nranks) + "ranks_" + algoName(s.algo) + "_" + protoName(s.proto);
  return s.edge < 0 ? name : std::string(kEdgeSettings[s.edge].name) + "_" + name;
}
void PrintTo(const ProtocolSlice& s, std::ostream* out) { *out << describeSlice(s); }

// Which slices run two channels and which four steps: every rank count meets one
// and two channels, 4 and 8 steps, across the two launch modes.
FifoSettings fifoSettingsFor(const ProtocolSlice& slice) {
  if (slice.edge >= 0) return kEdgeSettings[slice.edge].fifo;
  if (slice.oneThread) return slice.nranks == 4 ? FifoSettings{8, 2} : FifoSettings{4, 1};
  const bool threads = slice.mode == LaunchMode::kThreads;
  switch (slice.nranks) {
    case 2:
      return threads ? FifoSettings{8, 1} : FifoSettings{8, 2};
    case 3:
      return threads ? FifoSettings{4, 1} : FifoSettings{4, 2};
    case 4:
      return threads ? FifoSettings{8, 2} : FifoSettings{4, 1};
    case 5:
      return threads ? FifoSettings{4, 2} : FifoSettings{8, 1};
    default:
      return threads ? FifoSettings{8, 2} : FifoSettings{4, 1};
  }
}

// Types and ops whose results are exact (avg: within the harness tolerance).
struct TypeOp {
  ncclDataType_t type;
  OpKind op;
};
const TypeOp kTypeOps[] = {{ncclInt32, OpKind::kSum},  {ncclFloat32, OpKind::kSum}, {ncclFloat16, OpKind::kMax},
                           {ncclInt8, OpKind::kProd},  {ncclFloat64, OpKind::kMin}, {ncclUint8, OpKind::kSum},
                           {ncclFloat32, OpKind::kAvg}};

// A count as `multiple` slot payloads plus `delta` elements (multiple 0: an absolute count).
struct CountTemplate {
  size_t multiple;
  long delta;
};

enum class CaseKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSendRecv };
const CaseKind kAllKinds[] = {CaseKind::kAllReduce, CaseKind::kReduceScatter, CaseKind::kAllGather,
                              CaseKind::kBroadcast, CaseKind::kReduce,        CaseKind::kSendRecv};

std::vector<CountTemplate> countTemplates(CaseKind kind, int nranks, int channels, Algo algo) {
  std::vector<CountTemplate> t;
  // Tiny counts, a few primes, and the 64-element alignment of channel shares.
  for (long c : {0, 1, 2, 7, 13, 61, 63, 64, 65, 127}) t.push_back({0, c});
  const size_t n = static_cast<size_t>(nranks);
  const size_t c = kind == CaseKind::kSendRecv ? 1 : static_cast<size_t>(channels);  // a peer has one lane
  // One slot; one slot per channel; one FIFO (8 slots) per channel, and past it.
  std::vector<size_t> multiples = {1, c, 8 * c};
  if (kind == CaseKind::kAllReduce) {
    t.push_back({0, 16 * nranks - 1});  // ring blocks are rounded to 16 elements
    t.push_back({0, 16 * nranks + 1});
    multiples.push_back(n * c);                               // ring: one round of n blocks per channel; tree: n steps
    if (algo == Algo::kRing) multiples.push_back(4 * n * c);  // 8(n-1) ring steps: the FIFO wraps even at n = 2
  }
  for (size_t m : multiples) {
    for (long d : {-1L, 0L, 1L}) t.push_back({m, d});
  }
  return t;
}

Collective collectiveOf(CaseKind kind) {
  switch (kind) {
    case CaseKind::kAllReduce:
      return Collective::kAllReduce;
    case CaseKind::kReduceScatter:
      return Collective::kReduceScatter;
    case CaseKind::kAllGather:
      return Collective::kAllGather;
    case CaseKind::kBroadcast:
      return Collective::kBroadcast;
    default:
      return Collective::kReduce;
  }
}

using TestCase = std::variant<CollectiveCase, SendRecvCase>;

struct SliceCases {
  std::vector<TestCase> cases;
  std::map<std::string, size_t> callsPerCollective;  // as the tuning log names them
};

SliceCases buildCases(const ProtocolSlice& slice, const FifoSettings& fifo) {
  SliceCases out;
  uint64_t seed = 1;
  const size_t payload = slotPayloadBytes(slice.proto, fifo);
  for (CaseKind kind : kAllKinds) {
    if (slice.algo == Algo::kTree && kind != CaseKind::kAllReduce) continue;  // Tree only runs AllReduce
    const bool reducing = kind == CaseKind::kAllReduce || kind == CaseKind::kReduceScatter || kind == CaseKind::kReduce;
    std::set<std::tuple<size_t, ncclDataType_t, OpKind>> seen;  // data movement ignores the op
    size_t k = 0;  // alternates placement and roots, so every boundary meets both
    for (const CountTemplate& t : countTemplates(kind, slice.nranks, fifo.channels, slice.algo)) {
      for (const TypeOp& typeOp : kTypeOps) {
        const size_t elementsPerSlot = payload / traitsOf(typeOp.type).size;
        const long count = static_cast<long>(t.multiple * elementsPerSlot) + t.delta;
        const OpKind op = reducing ? typeOp.op : OpKind::kSum;
        if (count < 0 || !seen.insert({static_cast<size_t>(count), typeOp.type, op}).second) continue;
        ++k;
        if (kind == CaseKind::kSendRecv) {
          const int shift = 1 + static_cast<int>(k % static_cast<size_t>(slice.nranks - 1));
          out.cases.push_back(SendRecvCase{typeOp.type, static_cast<size_t>(count), shift, seed++});
          ++out.callsPerCollective["SendRecv"];
          continue;
        }
        CollectiveCase c;
        c.collective = collectiveOf(kind);
        c.type = typeOp.type;
        c.op = op;
        c.count = static_cast<size_t>(count);
        c.inPlace = k % 2 == 1;
        c.root = static_cast<int>((k / 2) % static_cast<size_t>(slice.nranks));
        c.seed = seed++;
        out.cases.push_back(c);
        ++out.callsPerCollective[collectiveName(c.collective)];
      }
    }
  }
  if (slice.algo == Algo::kRing) {  // a send to self, past one slot: a local copy beside the protocol
    const size_t count = payload + 3;
    out.cases.push_back(SendRecvCase{ncclUint8, count, 0, seed++});
    ++out.callsPerCollective["SendRecv"];
  }
  return out;
}

// Every rank's communicator has the channels NCCL_MIN/MAX_NCHANNELS asked for (its
// "Init COMPLETE" INFO line says "nChannels C").
void expectChannelCount(const ProtocolSlice& slice, const FifoSettings& fifo, const TuningLogCapture& log) {
  std::set<int> ranksReporting;
  for (const std::string& line : log.lines()) {
    if (line.find("Init COMPLETE") == std::string::npos) continue;
    int rank = -1, nChannels = -1;
    const size_t at = line.find(" rank ");
    const size_t channelsAt = line.find(" nChannels ");
    if (at == std::string::npos || channelsAt == std::string::npos ||
        std::sscanf(line.c_str() + at, " rank %d", &rank) != 1 ||
        std::sscanf(line.c_str() + channelsAt, " nChannels %d", &nChannels) != 1) {
      ADD_FAILURE() << "unparsable init line: " << line;
      continue;
    }
    ranksReporting.insert(rank);
    EXPECT_EQ(nChannels, fifo.channels) << line;
  }
  EXPECT_EQ(ranksReporting.size(), static_cast<size_t>(slice.nranks)) << "ranks that logged Init COMPLETE";
}

// Every logged choice names the forced protocol (and Tree for AllReduce on a tree
// slice, Ring otherwise), and every rank logged each of its collective calls.
void expectForcedChoices(const ProtocolSlice& slice, const SliceCases& cases, const TuningLogCapture& log) {
  std::vector<TuningChoice> choices = log.choices();
  std::map<int, std::map<std::string, size_t>> perRank;
  size_t wrong = 0;
  for (const TuningChoice& choice : choices) {
    ++perRank[choice.rank][choice.collective];
    const char* wantAlgo = (slice.algo == Algo::kTree && choice.collective == "AllReduce") ? "Tree" : "Ring";
    if (choice.proto != protoName(slice.proto) || choice.algo != wantAlgo) {
      if (++wrong <= 3)
        ADD_FAILURE() << "expected Algo " << wantAlgo << " proto " << protoName(slice.proto) << ": " << choice.line;
    }
  }
  EXPECT_EQ(wrong, 0u) << "logged choices that differ from NCCL_ALGO/NCCL_PROTO";
  if (slice.oneThread) {  // one thread logs for every rank: its [rank] tag says nothing; count all lines
    std::map<std::string, size_t> total;
    for (const auto& [rank, byCollective] : perRank)
      for (const auto& [collective, lines] : byCollective) total[collective] += lines;
    for (const auto& [collective, calls] : cases.callsPerCollective) {
      const size_t linesPerCall = collective == "SendRecv" ? 2 : 1;
      EXPECT_EQ(total[collective], linesPerCall * calls * slice.nranks) << collective;
    }
    return;
  }
  ASSERT_EQ(perRank.size(), static_cast<size_t>(slice.nranks)) << "ranks that logged tuning choices";
  for (auto& [rank, byCollective] : perRank) {
    for (const auto& [collective, calls] : cases.callsPerCollective) {
      if (collective == "SendRecv") {  // one line per send and per receive
        EXPECT_EQ(byCollective[collective], 2 * calls) << "rank " << rank << " " << collective;
      } else {
        EXPECT_EQ(byCollective[collective], calls) << "rank " << rank << " " << collective;
      }
    }
  }
}

// One thread issues every rank's call of each case inside ncclGroupStart/End.
LaunchResult runCasesInGroups(int nranks, const SliceCases& cases) {
  return runAllRanksOneThread(nranks, [&](std::span<const ncclComm_t> comms) {
    std::vector<std::unique_ptr<CollectiveRankRunner>> runners;
    std::vector<FailureLog> logs(nranks);
    for (int rank = 0; rank < nranks; ++rank) runners.push_back(std::make_unique<CollectiveRankRunner>(rank, nranks));
    for (const TestCase& testCase : cases.cases) {
      if (const auto* s = std::get_if<SendRecvCase>(&testCase)) {
        runSendRecvCaseAllRanks(*s, comms, logs);
        continue;
      }
      const CollectiveCase& c = std::get<CollectiveCase>(testCase);
      for (int rank = 0; rank < nranks; ++rank) runners[rank]->prepare(c, 0, comms[rank], logs[rank]);
      std::vector<ncclResult_t> issued(nranks);
      const ncclResult_t start = ncclGroupStart();
      for (int rank = 0; rank < nranks; ++rank) issued[rank] = runners[rank]->issue(c, comms[rank]);
      const ncclResult_t end = ncclGroupEnd();
      for (int rank = 0; rank < nranks; ++rank) {
        if (start != ncclSuccess || end != ncclSuccess || issued[rank] != ncclSuccess) {
          logs[rank].add(std::string(collectiveName(c.collective)) + " count=" + std::to_string(c.count) +
                         ": GroupStart " + resultName(start) + ", call " + resultName(issued[rank]) + ", GroupEnd " +
                         resultName(end));
        } else {
          runners[rank]->verify(c, 0, logs[rank]);
        }
      }
    }
    std::vector<RankOutcome> outcomes;
    for (const FailureLog& log : logs) outcomes.push_back(log.outcome());
    return outcomes;
  });
}

class ProtocolTest : public testing::TestWithParam<ProtocolSlice> {};

TEST_P(ProtocolTest, EveryBoundaryMatchesReference) {
  const ProtocolSlice& slice = GetParam();
  const FifoSettings fifo = fifoSettingsFor(slice);
  ScopedEnv env;
  applyFifoSettings(env, fifo);
  env.set("NCCL_ALGO", algoName(slice.algo));
  env.set("NCCL_PROTO", protoName(slice.proto));
  if (slice.net) {
    forceLink(env, Link::kNet);
    // NET connections keep 2 slots unless told otherwise: let the edge settings reach them.
    env.set("CHORUS_NET_STEPS", std::to_string(fifo.steps));
  }
  TuningLogCapture log(env, "TUNING,INIT");
  const SliceCases cases = buildCases(slice, fifo);

  LaunchResult result = slice.oneThread ? runCasesInGroups(slice.nranks, cases)
                                        : runRanks(
                                              slice.mode, slice.nranks,
                                              [&](const RankContext& context) {
                                                CollectiveRankRunner runner(context.rank, context.nranks);
                                                FailureLog failures;
                                                for (const TestCase& testCase : cases.cases) {
                                                  if (const auto* c = std::get_if<CollectiveCase>(&testCase)) {
                                                    runner.run(*c, context.comm, failures);
                                                  } else {
                                                    runSendRecvCase(std::get<SendRecvCase>(testCase), context.comm,
                                                                    context.rank, context.nranks, failures);
                                                  }
                                                }
                                                return failures.outcome();
                                              },
                                              std::chrono::seconds(120));
  EXPECT_RANKS_OK(result);
  expectForcedChoices(slice, cases, log);
  expectChannelCount(slice, fifo, log);
}

std::string sliceName(const testing::TestParamInfo<ProtocolSlice>& info) { return describeSlice(info.param); }

std::vector<ProtocolSlice> allSlices() {
  std::vector<ProtocolSlice> slices;
  for (LaunchMode mode : {LaunchMode::kThreads, LaunchMode::kProcesses}) {
    for (int nranks : {2, 3, 4, 5, 8}) {
      for (Algo algo : {Algo::kRing, Algo::kTree}) {
        for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128}) slices.push_back({mode, nranks, algo, proto});
      }
    }
  }
  return slices;
}

INSTANTIATE_TEST_SUITE_P(Boundaries, ProtocolTest, testing::ValuesIn(allSlices()), sliceName);

// Each unusual setting on every algorithm and protocol, at a rank count that makes
// the trees interesting (4 or 5 ranks), one of them in processes.
std::vector<ProtocolSlice> edgeSlices() {
  std::vector<ProtocolSlice> slices;
  for (int edge = 0; edge < static_cast<int>(std::size(kEdgeSettings)); ++edge) {
    const LaunchMode mode = edge == 0 ? LaunchMode::kProcesses : LaunchMode::kThreads;
    const int nranks = edge % 2 == 0 ? 5 : 4;
    for (Algo algo : {Algo::kRing, Algo::kTree}) {
      for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
        slices.push_back({mode, nranks, algo, proto, edge});
    }
  }
  return slices;
}

// One thread driving all ranks of ncclCommInitAll: every wait of LL and LL128 must
// yield to the other ranks' lanes on the same thread.
std::vector<ProtocolSlice> oneThreadSlices() {
  std::vector<ProtocolSlice> slices;
  for (int nranks : {4, 5}) {
    for (Algo algo : {Algo::kRing, Algo::kTree}) {
      for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
        slices.push_back({LaunchMode::kThreads, nranks, algo, proto, -1, true});
    }
  }
  return slices;
}

INSTANTIATE_TEST_SUITE_P(OneThread, ProtocolTest, testing::ValuesIn(oneThreadSlices()), sliceName);

INSTANTIATE_TEST_SUITE_P(EdgeSettings, ProtocolTest, testing::ValuesIn(edgeSlices()), sliceName);

// Through the proxy and the socket net: every protocol's steps share one slot there and
// LL/LL128 publish tail (step_fifo.h). Every slice sets its steps on the NET connections
// too (CHORUS_NET_STEPS); sixteen outnumber the socket net's eight requests per comm, so
// the proxy meets a full request pool.
std::vector<ProtocolSlice> netSlices() {
  std::vector<ProtocolSlice> slices;
  for (int nranks : {3, 4}) {
    for (Algo algo : {Algo::kRing, Algo::kTree}) {
      for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
        slices.push_back({LaunchMode::kProcesses, nranks, algo, proto, -1, false, true});
    }
  }
  for (int edge : {1, 2}) {
    for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128})
      slices.push_back({LaunchMode::kProcesses, 4, Algo::kRing, proto, edge, false, true});
  }
  return slices;
}

INSTANTIATE_TEST_SUITE_P(Net, ProtocolTest, testing::ValuesIn(netSlices()), sliceName);

// The case list itself must reach the boundaries, or a passing run means little.
TEST(ProtocolCoverage, CountsStraddleEverySlotAndRoundBoundary) {
  const ProtocolSlice slice{LaunchMode::kThreads, 4, Algo::kRing, Proto::kLL128};
  const FifoSettings fifo{8, 2};
  const SliceCases cases = buildCases(slice, fifo);
  EXPECT_EQ(slotPayloadBytes(Proto::kSimple, 8), 8192u);
  EXPECT_EQ(slotPayloadBytes(Proto::kLL, 8), 1024u);
  EXPECT_EQ(slotPayloadBytes(Proto::kLL128, 8), 1920u);
  EXPECT_EQ(slotPayloadBytes(Proto::kLL128, 4), 3840u);
  EXPECT_EQ(slotPayloadBytes(Proto::kLL128, kEdgeSettings[0].fifo), 9u * 120);  // 10000 / 8 = 1250 B: 9 lines
  EXPECT_EQ(slotPayloadBytes(Proto::kLL, kEdgeSettings[0].fifo), 368u / 2);
  EXPECT_EQ(slotPayloadBytes(Proto::kSimple, kEdgeSettings[0].fifo), 12480u);
  std::set<size_t> allReduceBytes, allGatherCounts;
  std::set<ncclDataType_t> types;
  for (const TestCase& t : cases.cases) {
    if (const auto* c = std::get_if<CollectiveCase>(&t)) {
      types.insert(c->type);
      if (c->collective == Collective::kAllReduce) allReduceBytes.insert(c->count * traitsOf(c->type).size);
      if (c->collective == Collective::kAllGather) allGatherCounts.insert(c->count);
    }
  }
  EXPECT_GE(types.size(), 5u);
  for (const auto& [name, calls] : cases.callsPerCollective) EXPECT_GE(calls, 15u) << name;
  EXPECT_EQ(cases.callsPerCollective.size(), 6u);
  // AllReduce reaches one round of 4 ranks x 2 channels x one slot and 4 such rounds (the FIFO wraps).
  bool roundCrossed = false, fifoWrapped = false;
  for (size_t bytes : allReduceBytes) {
    roundCrossed |= bytes > 8 * 1920 && bytes <= 8 * 1920 + 8;
    fifoWrapped |= bytes > 32 * 1920;
  }
  EXPECT_TRUE(roundCrossed);
  EXPECT_TRUE(fifoWrapped);
  EXPECT_TRUE(allGatherCounts.count(0) && allGatherCounts.count(1));
}

// Buffers at odd addresses: each rank's send and receive pointers sit at different
// byte offsets (so no two sides of a copy share an alignment), uint8 data, counts
// around one slot. LL and LL128 pack user bytes into 8-byte words and 120-byte
// lines, which an aligned-only fast path would get wrong.
struct UnalignedSlice {
  Algo algo;
  Proto proto;
};

void PrintTo(const UnalignedSlice& s, std::ostream* out) { *out << algoName(s.algo) << "_" << protoName(s.proto); }

class UnalignedTest : public testing::TestWithParam<UnalignedSlice> {};

TEST_P(UnalignedTest, OddAddressesMatchReference) {
  const UnalignedSlice& slice = GetParam();
  const FifoSettings fifo{8, 2};
  ScopedEnv env;
  applyFifoSettings(env, fifo);
  env.set("NCCL_ALGO", algoName(slice.algo));
  env.set("NCCL_PROTO", protoName(slice.proto));
  const size_t payload = slotPayloadBytes(slice.proto, fifo);
  EXPECT_RANKS_OK(runRanks(LaunchMode::kThreads, 3, [&](const RankContext& context) {
    return runUnalignedCalls(context, payload, /*onlyAllReduce=*/slice.algo == Algo::kTree);
  }));
}

std::vector<UnalignedSlice> unalignedSlices() {
  std::vector<UnalignedSlice> slices;
  for (Algo algo : {Algo::kRing, Algo::kTree}) {
    for (Proto proto : {Proto::kSimple, Proto::kLL, Proto::kLL128}) slices.push_back({algo, proto});
  }
  return slices;
}

INSTANTIATE_TEST_SUITE_P(Unaligned, UnalignedTest, testing::ValuesIn(unalignedSlices()),
                         [](const testing::TestParamInfo<UnalignedSlice>& info) {
                           return std::string(algoName(info.param.algo)) + "_" + protoName(info.param.proto);
                         });

}  // namespace
}  // namespace chorus_test
