// One call's own narrowing of the tuner's choice (CallTuning, from an ncclCollConfig_t):
// the algorithm list as a call writes it, the algorithms it may leave each collective,
// the choice within them, and the cost of fewer channels.
#include <gtest/gtest.h>

#include "src/tune/tuner.h"

namespace chorus {
namespace {

constexpr uint32_t kTree = 1u << static_cast<int>(Algorithm::Tree);
constexpr uint32_t kRing = 1u << static_cast<int>(Algorithm::Ring);

TuneTopology topoOf(int nranks, int nChannels) {
  TuneTopology topo;
  topo.nranks = nranks;
  topo.nChannels = nChannels;
  return topo;
}

TEST(CallTuning, AlgorithmListsCountTheirNames) {
  EXPECT_EQ(parseAlgorithmList(" ring , ,").mask, kRing);
  EXPECT_EQ(parseAlgorithmList(" ring , ,").names, 1);
  EXPECT_EQ(parseAlgorithmList("RING,Tree").mask, kRing | kTree);
  EXPECT_EQ(parseAlgorithmList("^ring").mask, kTree);
  EXPECT_EQ(parseAlgorithmList("^").names, 0) << "\"^\" names nothing (its mask is everything)";
  EXPECT_EQ(parseAlgorithmList(", ,").names, 0);
  const SettingList nvls = parseAlgorithmList("nvls");
  EXPECT_EQ(nvls.outcome, SettingList::Outcome::NothingLeft);
  EXPECT_EQ(nvls.names, 1) << "an NCCL name Chorus lacks still counts";
  EXPECT_EQ(parseAlgorithmList("ring;tree").outcome, SettingList::Outcome::Unsupported);
  EXPECT_EQ(parseAlgorithmList("bogus").outcome, SettingList::Outcome::UnknownName);
}

TEST(CallTuning, SelectableAlgorithmsPerCollective) {
  EXPECT_EQ(selectableAlgorithms(CollKind::AllReduce), kRing | kTree);
  for (CollKind c : {CollKind::Broadcast, CollKind::Reduce, CollKind::AllGather, CollKind::ReduceScatter})
    EXPECT_EQ(selectableAlgorithms(c), kRing) << collName(c);
  EXPECT_EQ(selectableAlgorithms(CollKind::SendRecv), 0u);
}

TEST(CallTuning, ChoiceStaysWithinTheCallsAlgorithms) {
  const Tuner tuner(topoOf(4, 1), "", "");
  for (size_t bytes : {size_t(8), size_t(1) << 20, size_t(1) << 30}) {
    // Each choice after an unrestricted one of the same size: the cached choice must not leak.
    tuner.choose(CollKind::AllReduce, bytes);
    const TuneChoice tree = tuner.choose(CollKind::AllReduce, bytes, {kTree});
    EXPECT_EQ(tree.algo, Algorithm::Tree) << bytes;
    EXPECT_EQ(tree.timeUs, tuner.estimateUs(CollKind::AllReduce, bytes, Algorithm::Tree, tree.proto)) << bytes;
    EXPECT_EQ(tuner.choose(CollKind::AllReduce, bytes, {kRing}).algo, Algorithm::Ring) << bytes;
    // Nothing the communicator can run: its own candidates.
    EXPECT_EQ(tuner.choose(CollKind::Broadcast, bytes, {kTree}).algo, Algorithm::Ring) << bytes;
  }
  const Tuner single(topoOf(1, 1), "", "");  // one rank has no tree
  EXPECT_EQ(single.choose(CollKind::AllReduce, 4096, {kTree}).algo, Algorithm::Ring);
  const Tuner ringOnly(topoOf(4, 1), "Ring", "");  // what NCCL_ALGO leaves wins
  EXPECT_EQ(ringOnly.choose(CollKind::AllReduce, 8, {kTree | kRing}).algo, Algorithm::Ring);
}

TEST(CallTuning, FewerChannelsCostMore) {
  const Tuner tuner(topoOf(4, 4), "", "");
  const size_t bytes = size_t(256) << 20;
  const double all = tuner.choose(CollKind::AllReduce, bytes).timeUs;
  const double two = tuner.choose(CollKind::AllReduce, bytes, {kAllAlgorithms, 2}).timeUs;
  const double one = tuner.choose(CollKind::AllReduce, bytes, {kAllAlgorithms, 1}).timeUs;
  EXPECT_GT(two, 1.8 * all);
  EXPECT_GT(one, 1.8 * two);
  EXPECT_EQ(tuner.choose(CollKind::AllReduce, bytes, {kAllAlgorithms, 9}).timeUs, all) << "bounded by what it has";
}

}  // namespace
}  // namespace chorus
