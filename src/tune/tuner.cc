#include "src/tune/tuner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/debug.h"
#include "core/env.h"
#include "device/common/board.h"            // goesOnBoard
#include "device/common/ring_algorithms.h"  // kPairAllReduceMaxBytes, kGatherAllReduceMaxBytes
#include "src/tune/setting_list.h"
#include "src/tune/tuner_plugin.h"

namespace chorus {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kBytesPerUsPerGBs = 1e3;  // 1 GB/s = 1000 bytes per microsecond

constexpr uint32_t bitOf(Algorithm a) { return uint32_t(1) << static_cast<int>(a); }
constexpr uint32_t bitOf(Protocol p) { return uint32_t(1) << static_cast<int>(p); }
constexpr uint32_t kAllProtos = (uint32_t(1) << kNumProtocols) - 1;

// NCCL's algorithm names; those with bit -1 exist in NCCL only.
constexpr SettingName kAlgoNames[] = {
    {"Tree", static_cast<int>(Algorithm::Tree)},
    {"Ring", static_cast<int>(Algorithm::Ring)},
    {"CollnetDirect", -1},
    {"CollnetChain", -1},
    {"NVLS", -1},
    {"NVLSTree", -1},
    {"PAT", -1},
};
constexpr SettingName kProtoNames[] = {
    {"LL", static_cast<int>(Protocol::LL)},
    {"LL128", static_cast<int>(Protocol::LL128)},
    {"Simple", static_cast<int>(Protocol::Simple)},
};

// Search orders: on equal times the earlier one wins.
constexpr Algorithm kAlgoPreference[] = {Algorithm::Ring, Algorithm::Tree};
constexpr Protocol kProtoPreference[] = {Protocol::Simple, Protocol::LL128, Protocol::LL};

// How a collective with an algorithm loads the links; see the table in tuner.h.
struct CostShape {
  double hops;              // sequential hand-offs on the critical path
  double linkBytesPerByte;  // bytes through the busiest channel link per byte of the call
  double fillHops;          // hops a grain crosses while later links idle (chains, trees)
};

int ceilLog2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }

// Hops from the tree's root to its deepest rank: `treeDepth` where known, else a binary tree's.
int treeDepthOf(int treeDepth, int n) { return treeDepth > 0 ? treeDepth : ceilLog2(n); }

// `channelBytes`: one channel's share of the call, which is what the executor's programs
// see (pairAllReduce is taken per channel).
CostShape shapeOf(CollKind coll, Algorithm algo, int n, int treeDepth, size_t channelBytes) {
  if (coll == CollKind::SendRecv) return {1, 1, 0};
  if (n == 1) return {0, 1, 0};
  const double steps = n - 1;
  switch (coll) {
    case CollKind::AllReduce:
      if (algo == Algorithm::Tree) {
        const int depth = treeDepthOf(treeDepth, n);
        return {2.0 * depth, 2.0, 2.0 * (depth - 1)};
      }
      if (n == 2 && channelBytes <= kPairAllReduceMaxBytes) return {1, 1, 0};               // pairAllReduce
      if (n > 2 && n * channelBytes <= kGatherAllReduceMaxBytes) return {steps, steps, 0};  // gatherAllReduce
      return {2 * steps, 2 * steps / n, 0};
    case CollKind::ReduceScatter:
    case CollKind::AllGather:
      return {steps, steps / n, 0};
    case CollKind::Broadcast:
    case CollKind::Reduce:
      return {steps, 1, steps - 1};
    case CollKind::SendRecv:
      break;
  }
  return {1, 1, 0};
}

bool finitePositive(double v) { return std::isfinite(v) && v > 0; }

TuneTopology sanitized(TuneTopology topo) {
  const TuneTopology defaults;
  if (topo.nranks < 1) {
    WARN("Tuner: nranks %d is not positive; using 1", topo.nranks);
    topo.nranks = 1;
  }
  if (topo.nHosts < 1) topo.nHosts = 1;
  if (topo.nChannels < 1) {
    WARN("Tuner: nChannels %d is not positive; using 1", topo.nChannels);
    topo.nChannels = 1;
  }
  if (!finitePositive(topo.busBwGBs)) {
    WARN("Tuner: bus bandwidth %g GB/s is not a positive number; using %g", topo.busBwGBs, defaults.busBwGBs);
    topo.busBwGBs = defaults.busBwGBs;
  }
  if (!std::isfinite(topo.hopLatencyUs) || topo.hopLatencyUs < 0) {
    WARN("Tuner: hop latency %g us is not a number >= 0; using %g", topo.hopLatencyUs, defaults.hopLatencyUs);
    topo.hopLatencyUs = defaults.hopLatencyUs;
  }
  if (!std::isfinite(topo.localHopLatencyUs) || topo.localHopLatencyUs < 0 || !std::isfinite(topo.ringNetHopShare) ||
      topo.ringNetHopShare < 0 || topo.ringNetHopShare > 1) {
    WARN("Tuner: local hop latency %g us or ring network share %g out of range; every hop priced alike",
         topo.localHopLatencyUs, topo.ringNetHopShare);
    topo.localHopLatencyUs = defaults.localHopLatencyUs;
    topo.ringNetHopShare = defaults.ringNetHopShare;
  }
  return topo;
}

// One hop's latency for `algo`: the network's, or, where only some hops cross it, the mean
// over the hops the call takes (the ring's, or the tree's from root to deepest rank).
double hopLatencyOf(const TuneTopology& topo, Algorithm algo, int n) {
  if (topo.localHopLatencyUs <= 0) return topo.hopLatencyUs;
  double share = topo.ringNetHopShare;
  if (algo == Algorithm::Tree && topo.treeNetHops >= 0) {
    const int depth = treeDepthOf(topo.treeDepth, n);
    share = depth > 0 ? std::min(1.0, static_cast<double>(topo.treeNetHops) / depth) : 1.0;
  }
  return share * topo.hopLatencyUs + (1 - share) * topo.localHopLatencyUs;
}

const char* lowerAlgoName(Algorithm a) { return a == Algorithm::Tree ? "tree" : "ring"; }
const char* lowerProtoName(Protocol p) {
  switch (p) {
    case Protocol::LL:
      return "ll";
    case Protocol::LL128:
      return "ll128";
    case Protocol::Simple:
      return "simple";
  }
  return "?";
}

}  // namespace

SettingList parseAlgorithmList(std::string_view text) { return parseSettingList(text, kAlgoNames, kAllAlgorithms); }

uint32_t selectableAlgorithms(CollKind coll) {
  switch (coll) {
    case CollKind::AllReduce:
      return bitOf(Algorithm::Ring) | bitOf(Algorithm::Tree);
    case CollKind::SendRecv:
      return 0;
    default:
      return bitOf(Algorithm::Ring);
  }
}

const char* collName(CollKind coll) {
  switch (coll) {
    case CollKind::AllReduce:
      return "AllReduce";
    case CollKind::ReduceScatter:
      return "ReduceScatter";
    case CollKind::AllGather:
      return "AllGather";
    case CollKind::Broadcast:
      return "Broadcast";
    case CollKind::Reduce:
      return "Reduce";
    case CollKind::SendRecv:
      return "SendRecv";
  }
  return "Unknown";
}

Tuner::Tuner(const TuneTopology& topo, const std::string& algoSetting, const std::string& protoSetting,
             const TuneConstants& constants)
    : topo_(sanitized(topo)), constants_(constants) {
  algoMask_ = enabledMaskFromSetting("NCCL_ALGO", algoSetting, kAlgoNames, kAllAlgorithms);
  protoMask_ = enabledMaskFromSetting("NCCL_PROTO", protoSetting, kProtoNames, kAllProtos);
  if (topo_.ll128Hazard != nullptr && protoEnabled(Protocol::LL128)) {
    // NCCL lets NCCL_PROTO force LL128 anywhere; its lines could then arrive torn: a wrong result.
    protoMask_ &= ~bitOf(Protocol::LL128);
    const bool asked = !protoSetting.empty() && protoSetting.front() != '^';
    const bool nothingLeft = protoMask_ == 0;
    if (nothingLeft) protoMask_ = bitOf(Protocol::Simple);
    if (asked)
      WARN("NCCL_PROTO=%s: LL128 is not used on this communicator: %s; using %s", protoSetting.c_str(),
           topo_.ll128Hazard, nothingLeft ? "Simple" : "the other protocols named");
  }

  std::string fallenBack;
  for (int c = 0; c < kNumCollKinds; ++c) {
    const auto coll = static_cast<CollKind>(c);
    if (coll == CollKind::SendRecv) {  // point to point has no algorithm to choose
      candidateAlgos_[c] = bitOf(Algorithm::Ring);
      continue;
    }
    uint32_t usable = 0;
    for (Algorithm a : kAlgoPreference)
      if (algoEnabled(a) && algoValid(coll, a)) usable |= bitOf(a);
    if (usable == 0) {
      usable = bitOf(Algorithm::Ring);
      fallenBack += fallenBack.empty() ? "" : ", ";
      fallenBack += collName(coll);
    }
    candidateAlgos_[c] = usable;
  }
  if (!fallenBack.empty())
    WARN("NCCL_ALGO=%s leaves no algorithm for %s on %d ranks; using Ring for them", algoSetting.c_str(),
         fallenBack.c_str(), topo_.nranks);
}

Tuner Tuner::fromEnv(const TuneTopology& topo, const TuneConstants& constants) {
  return Tuner(topo, envString("NCCL_ALGO"), envString("NCCL_PROTO"), constants);
}

Tuner::~Tuner() = default;
Tuner::Tuner(Tuner&&) noexcept = default;
Tuner& Tuner::operator=(Tuner&&) noexcept = default;

void Tuner::attachPlugin(std::unique_ptr<TunerPlugin> plugin) {
  plugin_ = std::move(plugin);
  pluginFailureWarned_ = SaidOnce{};
  pluginDisabledAllWarned_ = SaidOnce{};
}

bool Tuner::algoValid(CollKind coll, Algorithm algo) const {
  if (algo == Algorithm::Ring) return true;
  return coll == CollKind::SendRecv || (coll == CollKind::AllReduce && topo_.nranks > 1);
}

double Tuner::estimateUs(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels) const {
  const double programs = modelUs(coll, bytes, algo, proto, maxChannels, false);
  return boardTakes(coll, algo, bytes) ? std::min(programs, modelUs(coll, bytes, algo, proto, maxChannels, true))
                                       : programs;
}

bool Tuner::onBoard(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels) const {
  if (!boardTakes(coll, algo, bytes)) return false;
  LastBoard& last = lastBoard_;  // every small call asks: loops repeat sizes
  if (last.bytes != bytes || last.algo != algo || last.proto != proto || last.maxChannels != maxChannels)
    last = LastBoard{bytes, algo, proto, maxChannels, boardPricedLower(coll, bytes, algo, proto, maxChannels)};
  return last.onBoard;
}

bool Tuner::boardTakes(CollKind coll, Algorithm algo, size_t bytes) const {
  return coll == CollKind::AllReduce && topo_.nranks > 2 && goesOnBoard(topo_.board, algo, bytes);
}

bool Tuner::boardPricedLower(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels) const {
  if (!boardTakes(coll, algo, bytes)) return false;
  return modelUs(coll, bytes, algo, proto, maxChannels, true) <= modelUs(coll, bytes, algo, proto, maxChannels, false);
}

double Tuner::modelUs(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels, bool board) const {
  if (coll == CollKind::SendRecv) algo = Algorithm::Ring;
  if (!algoValid(coll, algo)) return kInfinity;
  const int a = static_cast<int>(algo);
  const int p = static_cast<int>(proto);
  const int channels = maxChannels > 0 ? std::min(maxChannels, topo_.nChannels) : topo_.nChannels;
  // On the board: every rank's value in one hop, each rank reading the n-1 others.
  const CostShape shape = board ? CostShape{1, static_cast<double>(topo_.nranks - 1), 0}
                                : shapeOf(coll, algo, topo_.nranks, topo_.treeDepth, bytes / channels);

  const double channelBw = topo_.busBwGBs * kBytesPerUsPerGBs * constants_.bandwidthFactor[p];
  double callBw = channelBw * channels;
  if (algo == Algorithm::Tree) callBw *= constants_.treeBandwidthEfficiency;

  const double latency = constants_.baseLatencyUs[a][p] +
                         shape.hops * hopLatencyOf(topo_, algo, topo_.nranks) * constants_.hopLatencyFactor[p];
  const double size = static_cast<double>(bytes);
  const double streaming = size * shape.linkBytesPerByte / callBw;
  const double grain = std::min(size / channels, constants_.pipelineGrainBytes[p]);
  const double fill = shape.fillHops * grain / channelBw;
  return latency + streaming + fill;
}

uint32_t Tuner::callCandidates(CollKind coll, const CallTuning& call) const {
  const uint32_t candidates = candidateAlgos_[static_cast<int>(coll)];
  const uint32_t allowed = candidates & call.algos;
  return allowed != 0 ? allowed : candidates;
}

TuneChoice Tuner::cheapest(CollKind coll, size_t bytes, const CallTuning& call) const {
  TuneChoice best{Algorithm::Ring, Protocol::Simple, kInfinity};
  bool found = false;
  const uint32_t candidates = callCandidates(coll, call);
  for (Algorithm algo : kAlgoPreference) {
    if ((candidates & bitOf(algo)) == 0) continue;
    for (Protocol proto : kProtoPreference) {
      if (!protoEnabled(proto)) continue;
      const double t = estimateUs(coll, bytes, algo, proto, call.maxChannels);
      if (!found || t < best.timeUs) {
        best = {algo, proto, t};
        found = true;
      }
    }
  }
  return best;  // the constructor guarantees a candidate algorithm and an enabled protocol
}

TuneChoice Tuner::choose(CollKind coll, size_t bytes, const CallTuning& call) const {
  LastChoice& last = lastChoice_[static_cast<int>(coll)];
  if (last.bytes != bytes || last.call != call) last = {bytes, call, cheapest(coll, bytes, call)};
  return finishChoice(coll, bytes, call, last.choice);
}

TuneChoice Tuner::estimateChoice(CollKind coll, size_t bytes, const CallTuning& call) const {
  return finishChoice(coll, bytes, call, cheapest(coll, bytes, call));
}

TuneChoice Tuner::finishChoice(CollKind coll, size_t bytes, const CallTuning& call, const TuneChoice& own) const {
  TuneChoice choice = own;
  const bool consulted = plugin_ != nullptr && coll != CollKind::SendRecv;
  const std::optional<TuneChoice> picked = consulted ? pluginChoice(coll, bytes, call, choice) : std::nullopt;
  if (picked) choice = *picked;
  if (logEnabled(LogLevel::Info, kSubsysTuning)) {
    std::string note;
    const bool kept = picked && picked->algo == own.algo && picked->proto == own.proto && picked->timeUs == own.timeUs;
    if (picked) note = (kept ? " kept by tuner " : " chosen by tuner ") + plugin_->name();
    if (picked && picked->maxChannels > 0) note += ", nChannels " + std::to_string(picked->maxChannels);
    if (consulted && !picked) note = " (tuner " + plugin_->name() + " not followed)";
    logChoice(coll, bytes, call, choice, note);
  }
  return choice;
}

void Tuner::logChoice(CollKind coll, size_t bytes, const CallTuning& call, const TuneChoice& choice,
                      const std::string& note) const {
  // Every pair that can run the call, in NCCL's order; "(off)" marks those the settings
  // or the call's own selection exclude.
  const uint32_t candidates = callCandidates(coll, call);
  std::string estimates;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    const auto algo = static_cast<Algorithm>(a);
    if (coll == CollKind::SendRecv && algo != Algorithm::Ring) continue;
    if (!algoValid(coll, algo)) continue;
    for (int p = 0; p < kNumProtocols; ++p) {
      const auto proto = static_cast<Protocol>(p);
      char item[64];
      const bool off = (candidates & bitOf(algo)) == 0 || !protoEnabled(proto);
      snprintf(item, sizeof(item), "%s%s/%s %.2f%s", estimates.empty() ? "" : ", ", lowerAlgoName(algo),
               lowerProtoName(proto), estimateUs(coll, bytes, algo, proto, call.maxChannels), off ? " (off)" : "");
      estimates += item;
    }
  }
  const bool board = boardPricedLower(coll, bytes, choice.algo, choice.proto, call.maxChannels);
  INFO(kSubsysTuning, "%s: %zu Bytes -> Algo %s proto %s time %.2f us (%s)%s%s", collName(coll), bytes,
       algorithmName(choice.algo), protocolName(choice.proto), choice.timeUs, estimates.c_str(),
       board ? " on the board" : "", note.c_str());
}

float simulateGroupTimeUs(const Tuner& tuner, std::span<const TuneRequest> calls) {
  double total = 0;
  for (const TuneRequest& call : calls) total += tuner.estimateChoice(call.coll, call.bytes, call.call).timeUs;
  return static_cast<float>(total);
}

}  // namespace chorus
