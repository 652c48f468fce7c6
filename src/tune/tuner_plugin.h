// One communicator's use of an external tuner plugin (tuner_plugin_library.h finds it):
// init when the communicator is set up, getCollInfo for each collective call, destroy (v3,
// v4) or finalize (v5, v6) when the communicator goes. The Tuner consults it
// (tuner_plugin_choice.cc).
//
// What init is told: nRanks; nNodes (hosts); the logger (Chorus' log, TUNING by default);
// for v5 and v6 also a communicator id (the same on every rank), the NVLink domains (one per
// host: Chorus has no NVLink) and Chorus' constants in NCCL's layout:
//   baseLatencies[Tree|Ring][p]        TuneConstants::baseLatencyUs
//   hwLatencies[every link][Tree|Ring][p]   the slowest hop's latency for protocol p
//   everything else                     0 (Chorus has no such algorithm or bandwidth cap)
// The base latencies init leaves for Tree and Ring replace Chorus' (so a plugin can move
// the model as it moves NCCL's); changes to the rest are said at INFO and ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "src/tune/tune_constants.h"
#include "src/tune/tuner.h"
#include "src/tune/tuner_plugin_abi.h"
#include "src/tune/tuner_plugin_library.h"

namespace chorus {

// What a plugin's init learns about a communicator; the same on every rank.
struct TunerPluginComm {
  uint64_t commId = 0;  // NCCL hands a hash of the unique id
  int nranks = 1;
  int nNodes = 1;
  int minRanksPerNode = 1;
  int maxRanksPerNode = 1;
};

// NCCL_TUNER_PLUGIN and NCCL_NET_PLUGIN (nullopt when unset).
struct TunerPluginSettings {
  std::optional<std::string> tuner;
  std::optional<std::string> netPlugin;
  static TunerPluginSettings fromEnv();
};

// The cost table of getCollInfo: microseconds per algorithm and protocol (NCCL's numbering
// and size), NCCL_ALGO_PROTO_IGNORE where the pair is not available.
using PluginCostTable = float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];

class TunerPlugin {
 public:
  // Opens the plugin `settings` select and inits it for `comm`; null when there is none or
  // its init fails (a WARN naming the plugin, its file and the result). `constants`: in,
  // Chorus' constants; out, with the base latencies a v5/v6 init changed. `hopLatencyUs`:
  // the slowest hop's latency with Simple (TuneTopology::hopLatencyUs).
  static std::unique_ptr<TunerPlugin> open(const TunerPluginSettings& settings, const TunerPluginComm& comm,
                                           double hopLatencyUs, TuneConstants* constants);
  ~TunerPlugin();  // destroy / finalize
  TunerPlugin(const TunerPlugin&) = delete;
  TunerPlugin& operator=(const TunerPlugin&) = delete;

  // Asks the plugin about one call of `coll` (not SendRecv) with NCCL's nBytes. It may
  // change `table` and set `*nChannels` (0: no bound). One call per group, no registered
  // buffers: numPipeOps 1, regBuff 0. Calls on one context are serialised: the thread
  // planning the communicator's calls and ncclGroupSimulateEnd's caller may ask at once, and
  // NCCL calls a context's getCollInfo from one thread at a time.
  ncclResult_t getCollInfo(CollKind coll, size_t bytes, PluginCostTable& table, int* nChannels);

  const std::string& name() const { return library_->name; }
  int version() const { return library_->version; }
  const std::string& path() const { return library_->path; }

 private:
  TunerPlugin(std::shared_ptr<const TunerPluginLibrary> library, void* context);

  std::shared_ptr<const TunerPluginLibrary> library_;  // loaded while this communicator uses it
  void* context_;                                      // what init returned
  std::mutex contextMutex_;                            // see getCollInfo
};

// The TunerPluginComm of a communicator made from `ids` (the commId hashes them), whose
// ranks run on the hosts `hostOfRank` names (one identity per rank).
TunerPluginComm tunerPluginComm(std::span<const ncclUniqueId> ids, std::span<const uint64_t> hostOfRank);

}  // namespace chorus
