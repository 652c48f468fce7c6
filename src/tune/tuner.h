// The tuning model: which algorithm and protocol one collective call should use, and how
// long it should take. NCCL_ALGO / NCCL_PROTO restrict the choice (setting_list.h).
//
// Cost of one call of `bytes` (NCCL's nBytes: count × type size, × nranks for AllGather and
// ReduceScatter) with algorithm a and protocol p, over n ranks and C channels:
//
//   time = latency + streaming + fill
//   latency   = baseLatencyUs[a][p] + hops × hopLatencyUs × hopLatencyFactor[p]
//   streaming = bytes × linkBytesPerByte / (busBwGBs × C × bandwidthFactor[p] [× treeBandwidthEfficiency])
//   fill      = fillHops × min(bytes / C, pipelineGrainBytes[p]) / (busBwGBs × bandwidthFactor[p])
//
// busBwGBs is what one channel moves over the slowest hop; linkBytesPerByte is the busiest
// channel's traffic per byte of the call (1 / NCCL's algbw-to-busbw ratio); hops are the
// sequential steps on the critical path:
//
//   collective, algorithm   hops            linkBytesPerByte   fillHops
//   AllReduce, Ring         2(n-1)          2(n-1)/n           0
//     n == 2, <= 2 KiB/ch.  1               1                  0   (pairAllReduce, per channel share)
//     n > 2, n·share <= 8 KiB n-1          n-1                0   (gatherAllReduce, CPU executor;
//                                                                  the model is the CPU's for now)
//     on the board          1               n-1                0   (board.h: <= 4 KiB, 3+ ranks,
//                                                                  where priced below the above)
//   AllReduce, Tree         2·ceil(log2 n)  2                  2(ceil(log2 n) - 1)
//   ReduceScatter, Ring     n-1             (n-1)/n            0
//   AllGather, Ring         n-1             (n-1)/n            0
//   Broadcast/Reduce, Ring  n-1 (chain)     1                  n-2
//   SendRecv                1               1                  0
//   any, n == 1             0               1 (a local copy)   0
//
// Pipelining: a large call is cut into slots, and the per-hop latency is paid once per call,
// not per slot: the slots of a ring are in flight on every link at once (NCCL_STEPS of
// them), so once the pipeline runs each step's hand-off overlaps the next step's data.
// A ring keeps every link busy from its first step (each rank starts with its own block),
// so it has no fill. A chain or a tree does: a rank can forward only what it has fully
// received, so the first grain crosses the hops one after another while the later links
// idle — a whole slot for Simple, one line for LL and LL128.
// Tree: reduce up, then broadcast down (the CPU executor runs the passes one after the
// other), each pass pipelined; every byte crosses a channel's link twice, so its algbw is
// half the per-link bandwidth, as NCCL assumes. Half the channels run each of the two
// complementary trees, so the channel count multiplies tree bandwidth as it does the ring's.
// Broadcast and Reduce run as pipelined chains but are reported as Ring, as NCCL does.
//
// Validity: Tree only for AllReduce with n > 1; Ring for everything; SendRecv ignores the
// algorithm (reported as Ring) and NCCL_ALGO. When NCCL_ALGO leaves a collective without a
// valid algorithm (NCCL_ALGO=^Ring or =Tree, then ReduceScatter, ...), NCCL fails the call;
// Chorus runs it with Ring instead and says so in one WARN at construction.
//
// A tuner plugin (NCCL_TUNER_PLUGIN, tuner_plugin.h), when one is attached, is shown each
// collective call's cost table — Chorus' estimates for the pairs choose() would consider,
// NCCL_ALGO_PROTO_IGNORE for the rest (NCCL's other algorithms among them) — and may change
// it and bound the channels. Where it changed none of the pairs offered, Chorus' own choice
// stands (with the plugin's channel bound). Otherwise the lowest time among the pairs offered
// and left enabled wins, in NCCL's order on equal times (Tree before Ring, LL before LL128
// before Simple), with the plugin's time as the estimate: a plugin cannot enable what
// NCCL_ALGO, NCCL_PROTO or the call exclude, nor what Chorus cannot run. Where it disables
// every pair, or getCollInfo fails, Chorus' own choice runs (one WARN per communicator).
// Send/receive is not shown to the plugin, as in NCCL.
//
// One call may narrow the choice further (CallTuning, from its ncclCollConfig_t): fewer
// algorithms, fewer channels (the cost model then counts only those). The API layer has
// refused a forced selection that NCCL_ALGO leaves empty (src/api/coll_config.h); what is
// still empty here (Tree on one rank) runs with the communicator's own candidates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "device/common/step_fifo.h"  // Algorithm, Protocol (NCCL's numbering), kNumAlgorithms, kNumProtocols
#include "src/tune/setting_list.h"
#include "src/tune/tune_constants.h"

namespace chorus {

enum class CollKind : int { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, SendRecv };
constexpr int kNumCollKinds = 6;
const char* collName(CollKind coll);

constexpr uint32_t kAllAlgorithms = (uint32_t(1) << kNumAlgorithms) - 1;  // bits of Algorithm

// An algorithm list as NCCL_ALGO and a call's algSelection write it, over NCCL's names
// (Chorus lacks CollnetDirect, CollnetChain, NVLS, NVLSTree and PAT); nothing is logged.
SettingList parseAlgorithmList(std::string_view text);

// The algorithms a call's selection may leave `coll`, on more than one rank: Ring and
// Tree for AllReduce, Ring for the other collectives; point to point (and AlltoAll,
// Gather, Scatter, made of it) has none to choose.
uint32_t selectableAlgorithms(CollKind coll);

// What one call asks of the choice. The defaults ask nothing.
struct CallTuning {
  uint32_t algos = kAllAlgorithms;  // the algorithms it may use (bits of Algorithm)
  int maxChannels = 0;              // the most channels it may use; 0: every channel
  bool operator==(const CallTuning&) const = default;
};

// What the model knows about a communicator (filled by the host runtime at init).
struct TuneTopology {
  int nranks = 1;
  int nHosts = 1;  // distinct hosts (informational: the hop figures below are the slowest hop's)
  int nChannels = 1;
  // Per-hop link figures for the slowest hop of the ring (transport P2P = same process,
  // SHM = same host, NET = other host).
  double busBwGBs = 4.0;      // sustained bandwidth of one channel of one hop, GB/s, for Simple
  double hopLatencyUs = 1.0;  // one step's hand-off latency over one hop with Simple (tail/head round trip)
  int treeDepth = 0;          // hops from the tree's root to its deepest rank; 0: a binary tree over the ranks (log2 n)
  // Where only some hops cross the network (a communicator over several hosts): the latency
  // of the others (0: every hop costs hopLatencyUs), the share of the ring's hops that cross
  // it, and how many of the tree's root-to-deepest-rank hops do (-1: all).
  double localHopLatencyUs = 0;
  double ringNetHopShare = 1;
  int treeNetHops = -1;
  // Why LL128 must not be used (a GPU communicator whose links may deliver a warp's
  // 128-byte line in pieces, src/comm/comm_tuning.cc); null: it may. LL128 is then never
  // chosen, and an NCCL_PROTO that asks for it gets a WARN naming this.
  const char* ll128Hazard = nullptr;
  // The communicator has a board (device/common/board.h): a Ring AllReduce that fits its
  // slots may take one hop, each rank reading n-1 values (Tuner::onBoard).
  bool board = false;
};

struct TuneChoice {
  Algorithm algo;
  Protocol proto;
  double timeUs;
  int maxChannels = 0;  // the most channels the call may use, as a tuner plugin bounds them; 0: no bound
};

class TunerPlugin;

class Tuner {
 public:
  // algoSetting / protoSetting: the values of NCCL_ALGO / NCCL_PROTO ("" = everything).
  // Bad values are WARNed and ignored, never fatal. Out-of-range topology figures are
  // WARNed and replaced by the defaults.
  Tuner(const TuneTopology& topo, const std::string& algoSetting, const std::string& protoSetting,
        const TuneConstants& constants = TuneConstants{});
  // Reads NCCL_ALGO and NCCL_PROTO from the environment.
  static Tuner fromEnv(const TuneTopology& topo, const TuneConstants& constants = TuneConstants{});
  ~Tuner();
  Tuner(Tuner&&) noexcept;
  Tuner& operator=(Tuner&&) noexcept;

  // Consults `plugin` for every collective call from now on (null: none); the tuner owns it,
  // so the plugin's destroy runs with the tuner's end.
  void attachPlugin(std::unique_ptr<TunerPlugin> plugin);
  const TunerPlugin* plugin() const { return plugin_.get(); }

  // Microseconds for one call on at most `maxChannels` channels (0: all); +infinity when
  // the pair cannot run this collective.
  // A Ring AllReduce the board can take (board.h) is estimated on it or through the ring's
  // programs, whichever the model prices lower (onBoard).
  double estimateUs(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels = 0) const;
  // Whether a call of `algo` and `proto` runs on the board: a Ring AllReduce the board takes
  // that the model prices below the ring's own programs. The plan asks this of the final
  // pair; every rank's tuner answers alike.
  bool onBoard(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels = 0) const;
  // The cheapest enabled pair that `call` allows; ties prefer Simple over LL128 over LL,
  // then Ring over Tree. Always a pair that can run the collective. With a plugin, the
  // plugin's pick (see above). With NCCL_DEBUG_SUBSYS=TUNING, one INFO line.
  TuneChoice choose(CollKind coll, size_t bytes, const CallTuning& call = {}) const;
  // The choice choose() makes, without its cache, so a thread other than
  // the one planning the communicator's calls may ask (ncclGroupSimulateEnd beside a
  // non-blocking communicator's worker).
  TuneChoice estimateChoice(CollKind coll, size_t bytes, const CallTuning& call = {}) const;

  // The algorithms choose() considers for one call: the communicator's candidates the
  // call allows, or all of them where it allows none.
  uint32_t callCandidates(CollKind coll, const CallTuning& call) const;

  bool algoEnabled(Algorithm algo) const { return (algoMask_ >> static_cast<int>(algo)) & 1; }
  uint32_t enabledAlgorithms() const { return algoMask_; }  // what NCCL_ALGO leaves
  bool protoEnabled(Protocol proto) const { return (protoMask_ >> static_cast<int>(proto)) & 1; }
  // Can `algo` run `coll` on this communicator at all (independent of NCCL_ALGO)?
  bool algoValid(CollKind coll, Algorithm algo) const;
  // The algorithms choose() considers for `coll`: the enabled valid ones, else Ring.
  bool algoCandidate(CollKind coll, Algorithm algo) const {
    return (candidateAlgos_[static_cast<int>(coll)] >> static_cast<int>(algo)) & 1;
  }

  const TuneTopology& topology() const { return topo_; }
  const TuneConstants& constants() const { return constants_; }
  void setConstants(const TuneConstants& constants) {
    constants_ = constants;
    for (auto& last : lastChoice_) last.bytes = kNoBytes;
    lastBoard_.bytes = kNoBytes;
  }

 private:
  TuneChoice cheapest(CollKind coll, size_t bytes, const CallTuning& call) const;
  // Whether the board can take the call at all (board.h), whatever the model says.
  bool boardTakes(CollKind coll, Algorithm algo, size_t bytes) const;
  // onBoard's answer, uncached.
  bool boardPricedLower(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels) const;
  // `own` (Chorus' cheapest pair) after the plugin's say, with the TUNING line.
  TuneChoice finishChoice(CollKind coll, size_t bytes, const CallTuning& call, const TuneChoice& own) const;
  // The model's microseconds for one call, on the board or through the algorithm's programs.
  double modelUs(CollKind coll, size_t bytes, Algorithm algo, Protocol proto, int maxChannels, bool board) const;
  // The plugin's pick for one call (`own` where it left Chorus' estimates as they were), or
  // nullopt (WARNed once) where Chorus' own must run (tuner_plugin_choice.cc).
  std::optional<TuneChoice> pluginChoice(CollKind coll, size_t bytes, const CallTuning& call,
                                         const TuneChoice& own) const;
  void logChoice(CollKind coll, size_t bytes, const CallTuning& call, const TuneChoice& choice,
                 const std::string& note) const;

  TuneTopology topo_;
  TuneConstants constants_;
  uint32_t algoMask_ = 0;
  uint32_t protoMask_ = 0;
  uint32_t candidateAlgos_[kNumCollKinds] = {};
  // The latest choice per collective: loops repeat sizes, and estimating every pair costs
  // a fair part of a small call. Only the thread planning the communicator's calls touches
  // these caches (choose, onBoard); estimateChoice leaves them alone.
  static constexpr size_t kNoBytes = SIZE_MAX;
  struct LastChoice {
    size_t bytes = kNoBytes;
    CallTuning call{};
    TuneChoice choice{};
  };
  mutable LastChoice lastChoice_[kNumCollKinds];
  struct LastBoard {  // the latest onBoard answer
    size_t bytes = kNoBytes;
    Algorithm algo = Algorithm::Ring;
    Protocol proto = Protocol::Simple;
    int maxChannels = 0;
    bool onBoard = false;
  };
  mutable LastBoard lastBoard_;
  std::unique_ptr<TunerPlugin> plugin_;
  // Said once per communicator: the plugin's getCollInfo failed; it disabled every pair.
  // Atomic: ncclGroupSimulateEnd's caller may ask beside the planning thread.
  // (A Tuner moves: each flag moves with what it said.)
  struct SaidOnce {
    std::atomic<bool> said{false};
    SaidOnce() = default;
    SaidOnce(SaidOnce&& other) noexcept : said(other.said.load()) {}
    SaidOnce& operator=(SaidOnce&& other) noexcept {
      said.store(other.said.load());
      return *this;
    }
    bool first() { return !said.exchange(true); }  // true for the first caller only
  };
  mutable SaidOnce pluginFailureWarned_;
  mutable SaidOnce pluginDisabledAllWarned_;
};

// One call of a group, for ncclGroupSimulateEnd.
struct TuneRequest {
  CollKind coll;
  size_t bytes;
  CallTuning call{};
};
// The estimated time of a group: the calls run one after another on the same channels, so
// their chosen times add up (as NCCL's simulation does).
float simulateGroupTimeUs(const Tuner& tuner, std::span<const TuneRequest> calls);

}  // namespace chorus
