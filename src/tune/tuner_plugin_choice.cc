// How a tuner plugin's answer becomes a call's choice: Chorus' estimates in NCCL's cost
// table, the plugin's changes, then NCCL's pick among what Chorus can run (tuner.h).
#include <cmath>
#include <cstring>

#include "core/debug.h"
#include "src/tune/tuner.h"
#include "src/tune/tuner_plugin.h"

namespace chorus {
namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::Tree, Algorithm::Ring};  // NCCL's order
constexpr Protocol kProtocols[] = {Protocol::LL, Protocol::LL128, Protocol::Simple};

bool offered(const PluginCostTable& table, Algorithm a, Protocol p) {
  return table[static_cast<int>(a)][static_cast<int>(p)] >= 0;
}

}  // namespace

std::optional<TuneChoice> Tuner::pluginChoice(CollKind coll, size_t bytes, const CallTuning& call,
                                              const TuneChoice& own) const {
  PluginCostTable table;
  for (auto& row : table)
    for (float& time : row) time = NCCL_ALGO_PROTO_IGNORE;
  const uint32_t candidates = callCandidates(coll, call);
  for (Algorithm a : kAlgorithms) {
    if (((candidates >> static_cast<int>(a)) & 1) == 0) continue;
    for (Protocol p : kProtocols) {
      if (protoEnabled(p)) {
        table[static_cast<int>(a)][static_cast<int>(p)] =
            static_cast<float>(estimateUs(coll, bytes, a, p, call.maxChannels));
      }
    }
  }
  PluginCostTable offer;
  std::memcpy(offer, table, sizeof(table));

  int nChannels = 0;
  const ncclResult_t result = plugin_->getCollInfo(coll, bytes, table, &nChannels);
  if (result != ncclSuccess) {
    if (pluginFailureWarned_.first()) {
      WARN(
          "TUNER/Plugin %s: getCollInfo failed for %s of %zu bytes: %s (%d); using Chorus' own choice "
          "(said once per communicator)",
          plugin_->name().c_str(), collName(coll), bytes, ncclGetErrorString(result), static_cast<int>(result));
    }
    return std::nullopt;
  }
  const int maxChannels = nChannels > 0 ? nChannels : 0;

  // Left as offered: Chorus' own choice, exactly (the table holds its estimates in float).
  bool changed = false;
  for (Algorithm a : kAlgorithms) {
    for (Protocol p : kProtocols) {
      const int ai = static_cast<int>(a);
      const int pi = static_cast<int>(p);
      changed |= offered(offer, a, p) && std::memcmp(&table[ai][pi], &offer[ai][pi], sizeof(float)) != 0;
    }
  }
  if (!changed) return TuneChoice{own.algo, own.proto, own.timeUs, maxChannels};

  // NCCL's pick: the lowest time >= 0, the first in table order on equal times.
  std::optional<TuneChoice> best;
  for (Algorithm a : kAlgorithms) {
    for (Protocol p : kProtocols) {
      const float time = table[static_cast<int>(a)][static_cast<int>(p)];
      if (!offered(offer, a, p) || !std::isfinite(time) || time < 0) continue;
      if (!best || time < best->timeUs) best = TuneChoice{a, p, time, maxChannels};
    }
  }
  if (!best) {
    if (pluginDisabledAllWarned_.first()) {
      WARN(
          "TUNER/Plugin %s disabled every algorithm and protocol Chorus can run for %s of %zu bytes; using Chorus' "
          "own choice (said once per communicator)",
          plugin_->name().c_str(), collName(coll), bytes);
    }
    return std::nullopt;
  }
  // A time the plugin left alone is Chorus' estimate, in full precision.
  const int ai = static_cast<int>(best->algo);
  const int pi = static_cast<int>(best->proto);
  if (std::memcmp(&table[ai][pi], &offer[ai][pi], sizeof(float)) == 0) {
    best->timeUs = estimateUs(coll, bytes, best->algo, best->proto, call.maxChannels);
  }
  return best;
}

}  // namespace chorus
