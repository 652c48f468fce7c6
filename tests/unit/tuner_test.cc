// The tuning model: NCCL_ALGO / NCCL_PROTO parsing, validity of every choice, the shape of
// the cost model, and the TUNING log line.
#include "src/tune/tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/debug.h"
#include "device/common/ring_algorithms.h"
#include "src/tune/setting_list.h"

namespace chorus {
namespace {

constexpr CollKind kColls[] = {CollKind::AllReduce, CollKind::ReduceScatter, CollKind::AllGather,
                               CollKind::Broadcast, CollKind::Reduce,        CollKind::SendRecv};
constexpr Algorithm kAlgos[] = {Algorithm::Tree, Algorithm::Ring};
constexpr Protocol kProtos[] = {Protocol::LL, Protocol::LL128, Protocol::Simple};

TuneTopology topoOf(int nranks, int nChannels = 1) {
  TuneTopology topo;
  topo.nranks = nranks;
  topo.nChannels = nChannels;
  return topo;
}

// 0, then 2^k - 1, 2^k, 2^k + 1 up to 2^40, ascending.
std::vector<size_t> sweepSizes() {
  std::vector<size_t> sizes = {0};
  for (int k = 0; k <= 40; ++k) {
    const size_t p = size_t(1) << k;
    if (p - 1 > sizes.back()) sizes.push_back(p - 1);
    if (p > sizes.back()) sizes.push_back(p);
    sizes.push_back(p + 1);
  }
  return sizes;
}

bool lastWarningMentions(const std::string& a, const std::string& b = "") {
  const std::string text = lastErrorText();
  return text.find(a) != std::string::npos && text.find(b) != std::string::npos;
}

uint32_t algoMask(const Tuner& t) {
  return (t.algoEnabled(Algorithm::Tree) ? 1u : 0u) | (t.algoEnabled(Algorithm::Ring) ? 2u : 0u);
}
uint32_t protoMask(const Tuner& t) {
  return (t.protoEnabled(Protocol::LL) ? 1u : 0u) | (t.protoEnabled(Protocol::LL128) ? 2u : 0u) |
         (t.protoEnabled(Protocol::Simple) ? 4u : 0u);
}

TEST(TunerNames, MatchNccl) {
  EXPECT_STREQ(algorithmName(Algorithm::Tree), "Tree");
  EXPECT_STREQ(algorithmName(Algorithm::Ring), "Ring");
  EXPECT_STREQ(protocolName(Protocol::LL), "LL");
  EXPECT_STREQ(protocolName(Protocol::LL128), "LL128");
  EXPECT_STREQ(protocolName(Protocol::Simple), "Simple");
  EXPECT_STREQ(collName(CollKind::ReduceScatter), "ReduceScatter");
  EXPECT_EQ(static_cast<int>(Algorithm::Tree), 0);
  EXPECT_EQ(static_cast<int>(Algorithm::Ring), 1);
  EXPECT_EQ(static_cast<int>(Protocol::LL), 0);
  EXPECT_EQ(static_cast<int>(Protocol::LL128), 1);
  EXPECT_EQ(static_cast<int>(Protocol::Simple), 2);
}

TEST(TunerSettings, AlgorithmLists) {
  const TuneTopology topo = topoOf(4);
  EXPECT_EQ(algoMask(Tuner(topo, "", "")), 3u);
  EXPECT_EQ(algoMask(Tuner(topo, "ring", "")), 2u);
  EXPECT_EQ(algoMask(Tuner(topo, "RING,tree", "")), 3u);
  EXPECT_EQ(algoMask(Tuner(topo, "^tree", "")), 2u);
  EXPECT_EQ(algoMask(Tuner(topo, "Tree", "")), 1u);
  EXPECT_EQ(algoMask(Tuner(topo, " ring , tree, ", "")), 3u);  // blanks and empty items are harmless
  EXPECT_EQ(protoMask(Tuner(topo, "ring", "")), 7u);           // NCCL_ALGO leaves protocols alone
}

TEST(TunerSettings, ProtocolLists) {
  const TuneTopology topo = topoOf(4);
  EXPECT_EQ(protoMask(Tuner(topo, "", "LL128")), 2u);
  EXPECT_EQ(protoMask(Tuner(topo, "", "^LL,LL128")), 4u);
  EXPECT_EQ(protoMask(Tuner(topo, "", "simple,ll")), 5u);
  EXPECT_EQ(protoMask(Tuner(topo, "", "^ll128")), 5u);
  EXPECT_EQ(algoMask(Tuner(topo, "", "LL")), 3u);
}

TEST(TunerSettings, UnknownNameIsWarnedAndTheSettingIgnored) {
  const TuneTopology topo = topoOf(4);
  clearLastError();
  EXPECT_EQ(algoMask(Tuner(topo, "bogus", "")), 3u);
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO", "bogus")) << lastErrorText();
  clearLastError();
  EXPECT_EQ(algoMask(Tuner(topo, "ring,bogus", "")), 3u);  // the whole setting, not just the token
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO", "'bogus'")) << lastErrorText();
  clearLastError();
  EXPECT_EQ(protoMask(Tuner(topo, "", "LL,fast")), 7u);
  EXPECT_TRUE(lastWarningMentions("NCCL_PROTO", "'fast'")) << lastErrorText();

  const SettingList list = parseSettingList("Ring,Bogus", std::span<const SettingName>(), 3);
  EXPECT_EQ(list.outcome, SettingList::Outcome::UnknownName);
  EXPECT_EQ(list.problem, "Ring");  // no names known at all: the first token is the unknown one
}

TEST(TunerSettings, NothingLeftWarnsAndEnablesEverything) {
  const TuneTopology topo = topoOf(4);
  clearLastError();
  EXPECT_EQ(protoMask(Tuner(topo, "", "^Simple,LL,LL128")), 7u);
  EXPECT_TRUE(lastWarningMentions("NCCL_PROTO", "leaves nothing")) << lastErrorText();
  clearLastError();
  EXPECT_EQ(algoMask(Tuner(topo, "^Ring,Tree", "")), 3u);
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO", "leaves nothing")) << lastErrorText();
  clearLastError();
  EXPECT_EQ(algoMask(Tuner(topo, "PAT", "")), 3u);  // only a name Chorus lacks
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO=PAT")) << lastErrorText();
}

TEST(TunerSettings, NcclOnlyAlgorithmsAreAcceptedAndIgnored) {
  const TuneTopology topo = topoOf(4);
  EXPECT_EQ(algoMask(Tuner(topo, "CollnetDirect,Ring", "")), 2u);
  EXPECT_EQ(algoMask(Tuner(topo, "nvls,NVLSTree,pat,collnetchain,collnetdirect,tree", "")), 1u);
  EXPECT_EQ(algoMask(Tuner(topo, "^NVLS,PAT", "")), 3u);
  EXPECT_EQ(algoMask(Tuner(topo, "^NVLS,Tree", "")), 2u);

  static constexpr SettingName kNames[] = {{"Tree", 0}, {"Ring", 1}, {"NVLS", -1}, {"PAT", -1}};
  const SettingList list = parseSettingList("nvls,Ring,PAT", kNames, 3);
  EXPECT_EQ(list.outcome, SettingList::Outcome::Ok);
  EXPECT_EQ(list.mask, 2u);
  EXPECT_EQ(list.foreignNames, (std::vector<std::string>{"nvls", "PAT"}));
  EXPECT_EQ(parseSettingList("", kNames, 3).outcome, SettingList::Outcome::Unset);
  EXPECT_EQ(parseSettingList("^", kNames, 3).mask, 3u);  // "all except nothing"
}

TEST(TunerSettings, PerCollectiveListsAreWarnedAndIgnored) {
  clearLastError();
  EXPECT_EQ(algoMask(Tuner(topoOf(4), "ring;allreduce:tree", "")), 3u);
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO", "per-collective")) << lastErrorText();
}

TEST(TunerValidity, TreeOnlyForAllReduceOnSeveralRanks) {
  for (int n = 1; n <= 16; ++n) {
    const Tuner tuner(topoOf(n), "", "");
    for (CollKind coll : kColls) {
      for (Protocol proto : kProtos) {
        EXPECT_TRUE(std::isfinite(tuner.estimateUs(coll, 1024, Algorithm::Ring, proto)));
        const double tree = tuner.estimateUs(coll, 1024, Algorithm::Tree, proto);
        if (coll == CollKind::SendRecv) {
          EXPECT_EQ(tree, tuner.estimateUs(coll, 1024, Algorithm::Ring, proto)) << "SendRecv ignores the algorithm";
        } else if (coll == CollKind::AllReduce && n > 1) {
          EXPECT_TRUE(std::isfinite(tree)) << n;
        } else {
          EXPECT_TRUE(std::isinf(tree) && tree > 0) << collName(coll) << " n=" << n;
        }
      }
    }
  }
}

// NCCL fails a call that NCCL_ALGO leaves without an algorithm; Chorus runs it with Ring
// and WARNs once, at construction.
TEST(TunerValidity, ExcludingRingFallsBackToRingWhereNothingElseRuns) {
  clearLastError();
  const Tuner tuner(topoOf(4), "^Ring", "");
  EXPECT_TRUE(lastWarningMentions("NCCL_ALGO=^Ring", "ReduceScatter")) << lastErrorText();
  EXPECT_FALSE(lastWarningMentions("AllReduce")) << "AllReduce still has Tree: " << lastErrorText();
  EXPECT_FALSE(tuner.algoEnabled(Algorithm::Ring));
  for (size_t bytes : {size_t(0), size_t(8), size_t(1) << 30}) {
    EXPECT_EQ(tuner.choose(CollKind::ReduceScatter, bytes).algo, Algorithm::Ring);
    EXPECT_EQ(tuner.choose(CollKind::Broadcast, bytes).algo, Algorithm::Ring);
    EXPECT_EQ(tuner.choose(CollKind::AllReduce, bytes).algo, Algorithm::Tree);
  }
  clearLastError();
  const Tuner single(topoOf(1), "Tree", "");  // one rank: no tree at all
  EXPECT_TRUE(lastWarningMentions("AllReduce", "1 ranks")) << lastErrorText();
  EXPECT_EQ(single.choose(CollKind::AllReduce, 4096).algo, Algorithm::Ring);
}

// Every combination of NCCL_ALGO and NCCL_PROTO, every collective, every size 0..2^40 (powers
// of two and their neighbours), 1..16 ranks: the choice can run, respects the settings where
// it can, and is the cheapest allowed pair.
TEST(TunerChoice, AlwaysValidAndCheapest) {
  const std::vector<std::string> algoSettings = {"",      "Ring",       "Tree", "Ring,Tree", "^Ring",
                                                 "^Tree", "^Ring,Tree", "PAT",  "bogus"};
  std::vector<std::string> protoSettings = {"", "^LL,LL128,Simple", "fast"};
  for (uint32_t subset = 1; subset < 8; ++subset) {
    std::string list, excluded;
    for (Protocol p : kProtos) {
      std::string& into = (subset >> static_cast<int>(p)) & 1 ? list : excluded;
      if (!into.empty()) into += ',';
      into += protocolName(p);
    }
    protoSettings.push_back(list);
    if (!excluded.empty()) protoSettings.push_back("^" + excluded);
  }
  const std::vector<size_t> sizes = sweepSizes();
  for (int n = 1; n <= 16; ++n) {
    for (const std::string& algoSetting : algoSettings) {
      for (const std::string& protoSetting : protoSettings) {
        const Tuner tuner(topoOf(n, 1 + n % 3), algoSetting, protoSetting);
        for (CollKind coll : kColls) {
          bool enabledValidAlgo = false;
          for (Algorithm a : kAlgos) enabledValidAlgo |= tuner.algoEnabled(a) && tuner.algoValid(coll, a);
          for (size_t bytes : sizes) {
            const TuneChoice c = tuner.choose(coll, bytes);
            const std::string where = std::string(collName(coll)) + " n=" + std::to_string(n) +
                                      " bytes=" + std::to_string(bytes) + " ALGO=" + algoSetting +
                                      " PROTO=" + protoSetting;
            ASSERT_TRUE(std::isfinite(c.timeUs) && c.timeUs > 0) << where;
            ASSERT_TRUE(tuner.protoEnabled(c.proto)) << where;
            ASSERT_TRUE(tuner.algoValid(coll, c.algo)) << where;
            ASSERT_EQ(c.timeUs, tuner.estimateUs(coll, bytes, c.algo, c.proto)) << where;
            if (coll == CollKind::SendRecv || !enabledValidAlgo) {
              ASSERT_EQ(c.algo, Algorithm::Ring) << where;
            } else {
              ASSERT_TRUE(tuner.algoEnabled(c.algo)) << where;
            }
            for (Algorithm a : kAlgos) {
              for (Protocol p : kProtos) {
                if (tuner.algoCandidate(coll, a) && tuner.protoEnabled(p)) {
                  ASSERT_LE(c.timeUs, tuner.estimateUs(coll, bytes, a, p)) << where;
                }
              }
            }
          }
        }
      }
    }
  }
}

// Constants where the line protocols' hand-off is cheaper than Simple's, as on a GPU
// (NCCL's premise): the model must then pick LL for small calls and Simple for large ones.
TuneConstants lowLatencyLines() {
  TuneConstants k;
  k.baseLatencyUs[0][0] = 5.0;
  k.baseLatencyUs[0][1] = k.baseLatencyUs[0][2] = 6.0;
  k.baseLatencyUs[1][0] = 4.0;
  k.baseLatencyUs[1][1] = k.baseLatencyUs[1][2] = 5.0;
  k.hopLatencyFactor[0] = 0.3;
  k.hopLatencyFactor[1] = 0.5;
  k.hopLatencyFactor[2] = 1.0;
  k.bandwidthFactor[0] = 0.35;
  k.bandwidthFactor[1] = 120.0 / 128.0;
  return k;
}

TEST(TunerChoice, LLForSmallSimpleForLargeWhenLinesHandOffFaster) {
  // Up to 512 B: a 5-rank AllReduce of 1 KiB gathers (4 KiB through each link, at LL's
  // third of Simple's bandwidth, in half the ring's hops), and LL's cheaper hops no longer pay.
  const std::vector<size_t> small = {8, 16, 64, 100, 256, 512};
  const std::vector<size_t> large = {size_t(64) << 20, size_t(256) << 20, size_t(1) << 30, size_t(1) << 40};
  for (int n = 1; n <= 16; ++n) {
    const Tuner tuner(topoOf(n), "", "", lowLatencyLines());
    for (CollKind coll : kColls) {
      for (size_t bytes : small)
        EXPECT_EQ(tuner.choose(coll, bytes).proto, Protocol::LL) << collName(coll) << " n=" << n << " " << bytes;
      // Chains pay a fill of (n-2) Simple slots (512 KiB each) that LL128's 120-byte lines
      // avoid; past 8 ranks that outweighs LL128's 1/16 bandwidth loss up to ~128 MiB.
      const bool chain = coll == CollKind::Broadcast || coll == CollKind::Reduce;
      for (size_t bytes : large) {
        if (chain && n > 8 && bytes < (size_t(256) << 20)) continue;
        EXPECT_EQ(tuner.choose(coll, bytes).proto, Protocol::Simple) << collName(coll) << " n=" << n << " " << bytes;
      }
    }
  }
}

// The defaults are the CPU executor's calibration: Simple measured fastest at every size
// (BENCHMARKS.md), so the model must choose it for every ring, on any rank count. (Chains
// and trees may take LL128 at middle sizes: it forwards line by line, Simple by slots.)
TEST(TunerChoice, CpuCalibrationChoosesSimpleForRings) {
  for (int n = 1; n <= 16; ++n) {
    TuneTopology shm = topoOf(n);
    shm.hopLatencyUs = 0.1;
    const Tuner tuner(shm, "Ring", "");
    for (CollKind coll : {CollKind::AllReduce, CollKind::ReduceScatter, CollKind::AllGather, CollKind::SendRecv})
      for (size_t bytes : sweepSizes())
        ASSERT_EQ(tuner.choose(coll, bytes).proto, Protocol::Simple) << collName(coll) << " n=" << n << " " << bytes;
  }
}

TEST(TunerChoice, TreeForSmallAllReduceAtScaleRingForLarge) {
  const Tuner tuner(topoOf(16), "", "");
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, 8).algo, Algorithm::Tree);  // 8 hops instead of 30
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, size_t(1) << 30).algo, Algorithm::Ring);
  const Tuner pair(topoOf(2), "", "");  // same hops, the ring moves half as much per link
  EXPECT_EQ(pair.choose(CollKind::AllReduce, 8).algo, Algorithm::Ring);
}

// Two ranks exchange small AllReduce calls in one hop (pairAllReduce); above the pair's
// limit the ring's two hops come back, so the estimate steps up by one hop there. The
// limit applies to each channel's share, as the executor's programs take it per channel.
TEST(TunerModel, TwoRankSmallAllReduceTakesOneHop) {
  for (int channels : {2, 4}) {
    const Tuner two(topoOf(2, channels), "", "");
    const double hop = two.topology().hopLatencyUs * two.constants().hopLatencyFactor[2];
    const size_t limit = kPairAllReduceMaxBytes * channels;
    EXPECT_GE(two.estimateUs(CollKind::AllReduce, limit + channels, Algorithm::Ring, Protocol::Simple) -
                  two.estimateUs(CollKind::AllReduce, limit, Algorithm::Ring, Protocol::Simple),
              hop * 0.999)
        << channels << " channels";
  }
  const Tuner two(topoOf(2), "", "");
  const TuneConstants& k = two.constants();
  for (Protocol p : kProtos) {
    const int i = static_cast<int>(p);
    const double hop = two.topology().hopLatencyUs * k.hopLatencyFactor[i];
    const double below = two.estimateUs(CollKind::AllReduce, kPairAllReduceMaxBytes, Algorithm::Ring, p);
    const double above = two.estimateUs(CollKind::AllReduce, kPairAllReduceMaxBytes + 1, Algorithm::Ring, p);
    EXPECT_NEAR(below,
                k.baseLatencyUs[static_cast<int>(Algorithm::Ring)][i] + hop +
                    kPairAllReduceMaxBytes / (two.topology().busBwGBs * 1e3 * k.bandwidthFactor[i]),
                1e-9)
        << protocolName(p);
    EXPECT_GE(above - below, hop * 0.999) << protocolName(p);
  }
}

// Rings of three or more gather small AllReduce calls in n-1 hops (gatherAllReduce) while
// the n values of a channel's share fit kGatherAllReduceMaxBytes; above, the ring's 2(n-1)
// hops come back. With 4 ranks that makes the ring (3 hops) beat the tree (4) at 8 bytes.
TEST(TunerModel, SmallAllReduceOnThreeOrMoreRanksTakesNMinusOneHops) {
  for (int n : {3, 4, 8}) {
    const Tuner tuner(topoOf(n), "", "");
    const TuneConstants& k = tuner.constants();
    for (Protocol p : kProtos) {
      const int i = static_cast<int>(p);
      const double hop = tuner.topology().hopLatencyUs * k.hopLatencyFactor[i];
      const size_t limit = kGatherAllReduceMaxBytes / n;
      const double bw = tuner.topology().busBwGBs * 1e3 * k.bandwidthFactor[i];
      EXPECT_NEAR(tuner.estimateUs(CollKind::AllReduce, limit, Algorithm::Ring, p),
                  k.baseLatencyUs[static_cast<int>(Algorithm::Ring)][i] + (n - 1) * hop + limit * (n - 1) / bw, 1e-9)
          << n << " ranks, " << protocolName(p);
      EXPECT_GE(tuner.estimateUs(CollKind::AllReduce, limit + 1, Algorithm::Ring, p) -
                    tuner.estimateUs(CollKind::AllReduce, limit, Algorithm::Ring, p),
                (n - 1) * hop * 0.999 - limit * (n - 1) / bw)
          << n << " ranks, " << protocolName(p);
    }
  }
  EXPECT_EQ(Tuner(topoOf(4), "", "").choose(CollKind::AllReduce, 8).algo, Algorithm::Ring);
}

// Equal estimates: Simple over LL128 over LL, Ring over Tree.
TEST(TunerChoice, TiesPreferSimpleThenRing) {
  TuneConstants uniform;
  for (auto& row : uniform.baseLatencyUs)
    for (double& base : row) base = 3.0;
  for (int p = 0; p < kNumProtocols; ++p) {
    uniform.hopLatencyFactor[p] = 1.0;
    uniform.bandwidthFactor[p] = 1.0;
    uniform.pipelineGrainBytes[p] = 4096;
  }
  const Tuner all(topoOf(7), "", "", uniform);  // 7 ranks: a small ring call and the tree both take 6 hops
  ASSERT_EQ(all.estimateUs(CollKind::AllReduce, 0, Algorithm::Tree, Protocol::LL),
            all.estimateUs(CollKind::AllReduce, 0, Algorithm::Ring, Protocol::Simple));
  TuneChoice c = all.choose(CollKind::AllReduce, 0);
  EXPECT_EQ(c.algo, Algorithm::Ring);
  EXPECT_EQ(c.proto, Protocol::Simple);
  c = Tuner(topoOf(7), "", "^Simple", uniform).choose(CollKind::AllReduce, 0);
  EXPECT_EQ(c.algo, Algorithm::Ring);
  EXPECT_EQ(c.proto, Protocol::LL128);
  c = Tuner(topoOf(2), "", "LL", uniform).choose(CollKind::Broadcast, 12345);
  EXPECT_EQ(c.proto, Protocol::LL);
}

TEST(TunerModel, TimeNeverDecreasesWithSize) {
  const std::vector<size_t> sizes = sweepSizes();
  for (int n : {1, 2, 3, 4, 5, 8, 13, 16}) {
    for (int channels : {1, 4}) {
      const Tuner tuner(topoOf(n, channels), "", "");
      for (CollKind coll : kColls)
        for (Algorithm a : kAlgos)
          for (Protocol p : kProtos) {
            double previous = 0;
            for (size_t bytes : sizes) {
              const double t = tuner.estimateUs(coll, bytes, a, p);
              if (std::isinf(t)) break;
              ASSERT_GE(t, previous) << collName(coll) << " " << algorithmName(a) << "/" << protocolName(p)
                                     << " n=" << n << " bytes=" << bytes;
              previous = t;
            }
          }
    }
  }
}

TEST(TunerModel, LatencyIsBasePlusHops) {
  TuneTopology topo = topoOf(5);
  topo.hopLatencyUs = 2.0;
  const Tuner tuner(topo, "", "");
  const TuneConstants& k = tuner.constants();
  const int ring = static_cast<int>(Algorithm::Ring), tree = static_cast<int>(Algorithm::Tree);
  for (Protocol proto : kProtos) {
    const int p = static_cast<int>(proto);
    const double hop = 2.0 * k.hopLatencyFactor[p];
    EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::AllReduce, 0, Algorithm::Ring, proto),
                     k.baseLatencyUs[ring][p] + 4 * hop);  // a small call gathers: n-1 hops
    EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::AllReduce, 0, Algorithm::Tree, proto),
                     k.baseLatencyUs[tree][p] + 2 * 3 * hop);  // ceil(log2 5) = 3, up and down
    EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::AllGather, 0, Algorithm::Ring, proto),
                     k.baseLatencyUs[ring][p] + 4 * hop);
    EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::Broadcast, 0, Algorithm::Ring, proto),
                     k.baseLatencyUs[ring][p] + 4 * hop);
    EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::SendRecv, 0, Algorithm::Ring, proto), k.baseLatencyUs[ring][p] + hop);
  }
}

// Past the pipeline fill, one more byte costs linkBytesPerByte / bandwidth.
TEST(TunerModel, BandwidthTermPerCollective) {
  const int n = 4;
  for (int channels : {1, 3}) {
    TuneTopology topo = topoOf(n, channels);
    topo.busBwGBs = 10.0;
    const Tuner tuner(topo, "", "");
    const TuneConstants& k = tuner.constants();
    const size_t big = size_t(1) << 34;
    auto slope = [&](CollKind coll, Algorithm a, Protocol p) {
      return (tuner.estimateUs(coll, 2 * big, a, p) - tuner.estimateUs(coll, big, a, p)) / double(big);
    };
    for (Protocol proto : kProtos) {
      const double bytesPerUs = 10.0 * 1e3 * channels * k.bandwidthFactor[static_cast<int>(proto)];
      EXPECT_NEAR(slope(CollKind::AllReduce, Algorithm::Ring, proto) * bytesPerUs, 2.0 * (n - 1) / n, 1e-6);
      EXPECT_NEAR(slope(CollKind::ReduceScatter, Algorithm::Ring, proto) * bytesPerUs, double(n - 1) / n, 1e-6);
      EXPECT_NEAR(slope(CollKind::AllGather, Algorithm::Ring, proto) * bytesPerUs, double(n - 1) / n, 1e-6);
      EXPECT_NEAR(slope(CollKind::Broadcast, Algorithm::Ring, proto) * bytesPerUs, 1.0, 1e-6);
      EXPECT_NEAR(slope(CollKind::Reduce, Algorithm::Ring, proto) * bytesPerUs, 1.0, 1e-6);
      EXPECT_NEAR(slope(CollKind::SendRecv, Algorithm::Ring, proto) * bytesPerUs, 1.0, 1e-6);
      EXPECT_NEAR(slope(CollKind::AllReduce, Algorithm::Tree, proto) * bytesPerUs * k.treeBandwidthEfficiency, 2.0,
                  1e-6);
    }
    EXPECT_GT(k.bandwidthFactor[static_cast<int>(Protocol::Simple)],
              k.bandwidthFactor[static_cast<int>(Protocol::LL128)]);
    EXPECT_GT(k.bandwidthFactor[static_cast<int>(Protocol::LL128)], k.bandwidthFactor[static_cast<int>(Protocol::LL)]);
  }
}

// A chain's later links wait for the first grain; a ring's links are all busy from the start.
TEST(TunerModel, ChainsPayPipelineFillRingsDoNot) {
  const size_t big = size_t(1) << 30;
  const Tuner two(topoOf(2), "", ""), eight(topoOf(8), "", "");
  const TuneConstants& k = two.constants();
  const TuneTopology& topo = two.topology();
  for (Protocol proto : kProtos) {
    const int p = static_cast<int>(proto);
    const double channelBw = topo.busBwGBs * 1e3 * k.bandwidthFactor[p];
    const double extraHops = 6 * topo.hopLatencyUs * k.hopLatencyFactor[p];
    EXPECT_NEAR(eight.estimateUs(CollKind::Broadcast, big, Algorithm::Ring, proto) -
                    two.estimateUs(CollKind::Broadcast, big, Algorithm::Ring, proto),
                extraHops + 6 * k.pipelineGrainBytes[p] / channelBw, 1e-6);
    // AllGather's total bytes grow with n, its per-link bytes (n-1)/n: no fill term.
    const double ag8 = eight.estimateUs(CollKind::AllGather, big, Algorithm::Ring, proto);
    const double ag2 = two.estimateUs(CollKind::AllGather, big, Algorithm::Ring, proto);
    EXPECT_NEAR(ag8 - ag2, extraHops + (7.0 / 8 - 1.0 / 2) * big / channelBw, 1e-3);
  }
  // Below one grain the fill is the message itself: store and forward through every hop.
  const double small = 4096, channelBw = topo.busBwGBs * 1e3;
  EXPECT_NEAR(eight.estimateUs(CollKind::Broadcast, 4096, Algorithm::Ring, Protocol::Simple) -
                  eight.estimateUs(CollKind::Broadcast, 0, Algorithm::Ring, Protocol::Simple),
              7 * small / channelBw, 1e-9);
}

TEST(TunerModel, ConstantsAreAdjustable) {
  TuneConstants k = lowLatencyLines();
  for (auto& row : k.baseLatencyUs) row[static_cast<int>(Protocol::LL)] += 100;
  Tuner tuner(topoOf(4), "", "", lowLatencyLines());
  const double before = tuner.estimateUs(CollKind::AllReduce, 8, Algorithm::Ring, Protocol::LL);
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, 8).proto, Protocol::LL);
  tuner.setConstants(k);
  EXPECT_DOUBLE_EQ(tuner.estimateUs(CollKind::AllReduce, 8, Algorithm::Ring, Protocol::LL), before + 100);
  EXPECT_NE(tuner.choose(CollKind::AllReduce, 8).proto, Protocol::LL);
  const Tuner viaConstructor(topoOf(4), "", "", k);
  EXPECT_DOUBLE_EQ(viaConstructor.estimateUs(CollKind::AllReduce, 8, Algorithm::Ring, Protocol::LL), before + 100);
}

TEST(TunerModel, BadTopologyFiguresAreReplaced) {
  TuneTopology topo;
  topo.nranks = 0;
  topo.nChannels = -3;
  topo.busBwGBs = NAN;
  clearLastError();
  const Tuner tuner(topo, "", "");
  EXPECT_TRUE(lastWarningMentions("Tuner")) << lastErrorText();
  EXPECT_EQ(tuner.topology().nranks, 1);
  EXPECT_EQ(tuner.topology().nChannels, 1);
  EXPECT_EQ(tuner.topology().busBwGBs, TuneTopology{}.busBwGBs);
  EXPECT_TRUE(std::isfinite(tuner.choose(CollKind::AllReduce, 1 << 20).timeUs));
}

TEST(TunerSimulate, GroupTimeIsTheSumOfChosenTimes) {
  const Tuner tuner(topoOf(4), "", "");
  const TuneRequest calls[] = {{CollKind::AllReduce, 8}, {CollKind::AllGather, 1 << 20}, {CollKind::SendRecv, 4096}};
  double expected = 0;
  for (const TuneRequest& call : calls) expected += tuner.choose(call.coll, call.bytes).timeUs;
  EXPECT_FLOAT_EQ(simulateGroupTimeUs(tuner, calls), static_cast<float>(expected));
  EXPECT_EQ(simulateGroupTimeUs(tuner, {}), 0.0f);
}

// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING: one line per choose() with the choice and the estimates.
TEST(TunerLog, OneInfoLinePerChoice) {
  const std::string path = ::testing::TempDir() + "tuner_log_" + std::to_string(getpid()) + ".txt";
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
  resetDebugInit();
  {
    const Tuner tuner(topoOf(4), "^Tree", "", lowLatencyLines());
    tuner.choose(CollKind::AllReduce, 8);
    tuner.choose(CollKind::Broadcast, size_t(1) << 30);
  }
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG_FILE");
  resetDebugInit();  // closes the file

  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find(" Bytes -> Algo ") != std::string::npos) lines.push_back(line);
  std::remove(path.c_str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("NCCL INFO AllReduce: 8 Bytes -> Algo Ring proto LL time "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("ring/simple "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("tree/ll "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("(off)"), std::string::npos) << "Tree is excluded: " << lines[0];
  EXPECT_NE(lines[1].find("Broadcast: 1073741824 Bytes -> Algo Ring proto Simple time "), std::string::npos)
      << lines[1];
  EXPECT_EQ(lines[1].find("tree/"), std::string::npos) << "Tree cannot run Broadcast: " << lines[1];
}

// A communicator over two hosts: only the hops that cross hosts cost a network hop. Four
// ranks, two per host, a tree of host chains two hops deep with one hop between the hosts.
TEST(TunerModel, OnlyTheHopsThatCrossTheNetworkCostANetworkHop) {
  TuneTopology all;
  all.nranks = 4;
  all.nHosts = 2;
  all.busBwGBs = 1.6;
  all.hopLatencyUs = 35;
  all.treeDepth = 2;
  TuneTopology interleaved = all;  // hosts 0,2 | 1,3: every ring hop crosses, one tree hop does
  interleaved.localHopLatencyUs = 0.1;
  interleaved.ringNetHopShare = 1;
  interleaved.treeNetHops = 1;
  TuneTopology contiguous = interleaved;  // hosts 0,1 | 2,3: half the ring's hops cross
  contiguous.ringNetHopShare = 0.5;
  const Tuner mixedI(interleaved, "", ""), mixedC(contiguous, "", ""), uniform(all, "", "");
  const size_t small = 8;
  // The ring's hops all cross in the interleaved layout: priced as before.
  EXPECT_DOUBLE_EQ(mixedI.estimateUs(CollKind::AllReduce, small, Algorithm::Ring, Protocol::Simple),
                   uniform.estimateUs(CollKind::AllReduce, small, Algorithm::Ring, Protocol::Simple));
  // The tree's 4 hops (up and down 2), half of them local: 2 x (35 - 0.1) us cheaper, by the
  // Simple hop factor.
  const double treeAll = uniform.estimateUs(CollKind::AllReduce, small, Algorithm::Tree, Protocol::Simple);
  const double treeMixed = mixedI.estimateUs(CollKind::AllReduce, small, Algorithm::Tree, Protocol::Simple);
  EXPECT_LT(treeMixed, treeAll);
  EXPECT_EQ(mixedI.choose(CollKind::AllReduce, small).algo, Algorithm::Tree)
      << "interleaved: the ring crosses 3 times, the tree twice";
  // Contiguous, the ring's 3 hops cross 1.5 times on average: cheaper than the tree's 2.
  EXPECT_LT(mixedC.estimateUs(CollKind::AllReduce, small, Algorithm::Ring, Protocol::Simple),
            mixedI.estimateUs(CollKind::AllReduce, small, Algorithm::Ring, Protocol::Simple));
  EXPECT_EQ(mixedC.choose(CollKind::AllReduce, small).algo, Algorithm::Ring);
  // Bandwidth stays the network's: at 64 MiB the three price alike but for the latency.
  const size_t large = 64 << 20;
  EXPECT_NEAR(mixedC.estimateUs(CollKind::AllReduce, large, Algorithm::Ring, Protocol::Simple),
              uniform.estimateUs(CollKind::AllReduce, large, Algorithm::Ring, Protocol::Simple), 200);
}

}  // namespace
}  // namespace chorus
