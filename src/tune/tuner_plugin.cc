// Driving one communicator's tuner plugin table, whichever version it is.
#include "src/tune/tuner_plugin.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>

#include "core/debug.h"
#include "core/env.h"
#include "core/plugin_log.h"

namespace chorus {
namespace {

constexpr uint64_t kSubsys = kSubsysInit | kSubsysTuning;

template <typename Table>
constexpr bool kTakesConstants = std::is_same_v<Table, ncclTuner_v6_t> || std::is_same_v<Table, ncclTuner_v5_t>;

ncclFunc_t ncclFuncOf(CollKind coll) {
  switch (coll) {
    case CollKind::AllReduce:
      return ncclFuncAllReduce;
    case CollKind::ReduceScatter:
      return ncclFuncReduceScatter;
    case CollKind::AllGather:
      return ncclFuncAllGather;
    case CollKind::Broadcast:
      return ncclFuncBroadcast;
    case CollKind::Reduce:
      return ncclFuncReduce;
    case CollKind::SendRecv:
      break;
  }
  return ncclFuncSendRecv;
}

constexpr int kChorusAlgoRows[] = {NCCL_ALGO_TREE, NCCL_ALGO_RING};  // Chorus' Algorithm values, in NCCL's rows
static_assert(static_cast<int>(Algorithm::Tree) == NCCL_ALGO_TREE &&
              static_cast<int>(Algorithm::Ring) == NCCL_ALGO_RING);
static_assert(static_cast<int>(Protocol::LL) == NCCL_PROTO_LL &&
              static_cast<int>(Protocol::Simple) == NCCL_PROTO_SIMPLE);

// Chorus' constants in NCCL's layout; zero where Chorus has no counterpart.
ncclTunerConstants_v5_t ncclConstantsOf(const TuneConstants& constants, double hopLatencyUs) {
  ncclTunerConstants_v5_t out{};
  for (int a : kChorusAlgoRows) {
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
      out.baseLatencies[a][p] = constants.baseLatencyUs[a][p];
      for (int link = 0; link < NCCL_NUM_HW_LINKS; ++link) {
        out.hwLatencies[link][a][p] = hopLatencyUs * constants.hopLatencyFactor[p];
      }
    }
  }
  return out;
}

// Takes the Tree and Ring base latencies init left into `constants`; says what else it
// changed, which Chorus has no use for.
void takeNcclConstants(const ncclTunerConstants_v5_t& given, const ncclTunerConstants_v5_t& returned,
                       const std::string& pluginName, TuneConstants* constants) {
  ncclTunerConstants_v5_t rest = returned;
  for (int a : kChorusAlgoRows) {
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
      const double us = returned.baseLatencies[a][p];
      rest.baseLatencies[a][p] = given.baseLatencies[a][p];
      if (us == given.baseLatencies[a][p]) continue;
      if (!std::isfinite(us) || us < 0) {
        WARN("TUNER/Plugin %s: init set baseLatencies[%d][%d] to %g, not a number >= 0; keeping %g us",
             pluginName.c_str(), a, p, us, given.baseLatencies[a][p]);
        continue;
      }
      constants->baseLatencyUs[a][p] = us;
      INFO(kSubsys, "TUNER/Plugin %s: base latency of %s/%s set to %g us", pluginName.c_str(),
           algorithmName(static_cast<Algorithm>(a)), protocolName(static_cast<Protocol>(p)), us);
    }
  }
  if (std::memcmp(&rest, &given, sizeof(rest)) != 0) {
    INFO(kSubsys,
         "TUNER/Plugin %s: init changed constants Chorus has no counterpart for (hwLatencies, bandwidth caps, other "
         "algorithms); they are ignored",
         pluginName.c_str());
  }
}

// FNV-1a: a hash every rank computes the same from the same bytes.
uint64_t hashBytes(const unsigned char* bytes, size_t size, uint64_t hash) {
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

}  // namespace

TunerPluginSettings TunerPluginSettings::fromEnv() {
  return TunerPluginSettings{envValue("NCCL_TUNER_PLUGIN"), envValue("NCCL_NET_PLUGIN")};
}

TunerPluginComm tunerPluginComm(std::span<const ncclUniqueId> ids, std::span<const uint64_t> hostOfRank) {
  TunerPluginComm comm;
  uint64_t hash = 14695981039346656037ull;
  for (const ncclUniqueId& id : ids) {
    hash = hashBytes(reinterpret_cast<const unsigned char*>(id.internal), sizeof(id.internal), hash);
  }
  comm.commId = hash;
  std::map<uint64_t, int> ranksOnHost;
  for (uint64_t host : hostOfRank) ++ranksOnHost[host];
  comm.nranks = static_cast<int>(hostOfRank.size());
  comm.nNodes = std::max<int>(1, static_cast<int>(ranksOnHost.size()));
  if (!ranksOnHost.empty()) {
    const auto [fewest, most] = std::minmax_element(ranksOnHost.begin(), ranksOnHost.end(),
                                                    [](const auto& a, const auto& b) { return a.second < b.second; });
    comm.minRanksPerNode = fewest->second;
    comm.maxRanksPerNode = most->second;
  }
  return comm;
}

TunerPlugin::TunerPlugin(std::shared_ptr<const TunerPluginLibrary> library, void* context)
    : library_(std::move(library)), context_(context) {}

std::unique_ptr<TunerPlugin> TunerPlugin::open(const TunerPluginSettings& settings, const TunerPluginComm& comm,
                                               double hopLatencyUs, TuneConstants* constants) {
  std::shared_ptr<const TunerPluginLibrary> library = openTunerPlugin(settings.tuner, settings.netPlugin);
  if (library == nullptr) return nullptr;
  void* context = nullptr;
  const ncclTunerConstants_v5_t given = ncclConstantsOf(*constants, hopLatencyUs);
  ncclTunerConstants_v5_t returned = given;
  const ncclResult_t result = std::visit(
      [&](const auto* t) {
        using Table = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
        if constexpr (kTakesConstants<Table>) {
          ncclNvlDomainInfo_v5_t domains{comm.nNodes, comm.minRanksPerNode, comm.maxRanksPerNode};
          return t->init(&context, comm.commId, static_cast<size_t>(comm.nranks), static_cast<size_t>(comm.nNodes),
                         &pluginLogger<kSubsysTuning>, &domains, &returned);
        } else {
          return t->init(static_cast<size_t>(comm.nranks), static_cast<size_t>(comm.nNodes),
                         &pluginLogger<kSubsysTuning>, &context);
        }
      },
      library->table);
  if (result != ncclSuccess) {
    WARN("TUNER/Plugin %s (%s): init failed: %s (%d); using Chorus' own tuning", library->name.c_str(),
         library->path.c_str(), ncclGetErrorString(result), static_cast<int>(result));
    return nullptr;
  }
  if (library->version >= 5) takeNcclConstants(given, returned, library->name, constants);
  INFO(kSubsys, "TUNER/Plugin %s (ncclTunerPlugin_v%d) initialized: nRanks %d nNodes %d", library->name.c_str(),
       library->version, comm.nranks, comm.nNodes);
  return std::unique_ptr<TunerPlugin>(new TunerPlugin(std::move(library), context));
}

TunerPlugin::~TunerPlugin() {
  const ncclResult_t result = std::visit(
      [&](const auto* t) {
        if constexpr (kTakesConstants<std::remove_cv_t<std::remove_pointer_t<decltype(t)>>>) {
          return t->finalize(context_);
        } else {
          return t->destroy(context_);
        }
      },
      library_->table);
  if (result != ncclSuccess) {
    WARN("TUNER/Plugin %s (%s): %s failed: %s (%d)", name().c_str(), path().c_str(),
         version() >= 5 ? "finalize" : "destroy", ncclGetErrorString(result), static_cast<int>(result));
  }
  // library_ goes after this body: the library is closed only once its last user is done.
}

ncclResult_t TunerPlugin::getCollInfo(CollKind coll, size_t bytes, PluginCostTable& table, int* nChannels) {
  constexpr int kPipeOps = 1;
  constexpr int kRegisteredBuffers = 0;
  auto** rows = reinterpret_cast<float**>(&table[0][0]);  // the ABI's type; the plugin casts it back
  std::lock_guard<std::mutex> lock(contextMutex_);
  return std::visit(
      [&](const auto* t) {
        using Table = std::remove_cv_t<std::remove_pointer_t<decltype(t)>>;
        if constexpr (std::is_same_v<Table, ncclTuner_v3_t>) {
          return t->getCollInfo(context_, ncclFuncOf(coll), bytes, kPipeOps, rows, NCCL_NUM_ALGORITHMS,
                                NCCL_NUM_PROTOCOLS, nChannels);
        } else {
          return t->getCollInfo(context_, ncclFuncOf(coll), bytes, kPipeOps, rows, NCCL_NUM_ALGORITHMS,
                                NCCL_NUM_PROTOCOLS, kRegisteredBuffers, nChannels);
        }
      },
      library_->table);
}

}  // namespace chorus
