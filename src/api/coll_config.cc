#include "src/api/coll_config.h"

#include <cstddef>
#include <iterator>
#include <string>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

// NCCL 2.31's struct ends before launchCompletionEvent (2.32 appended it): the smallest a
// program may pass. Larger ones, of newer headers, are read up to what Chorus knows.
constexpr size_t kMinCollConfigSize = offsetof(ncclCollConfig_t, launchCompletionEvent);
constexpr int kCtaPolicyBits = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;

// "ring, tree": the algorithms of `mask`, for messages.
std::string algorithmNames(uint32_t mask) {
  std::string names;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    if ((mask >> a & 1) == 0) continue;
    names += names.empty() ? "" : ", ";
    for (const char* c = algorithmName(static_cast<Algorithm>(a)); *c != '\0'; ++c) names += char(*c | 0x20);
  }
  return names;
}

// "" when the parsed selection leaves a call of `coll` some algorithm, set in `algos`;
// else why it leaves none (`algos` untouched).
std::string selectionProblem(const SettingList& list, CollKind coll, uint32_t* algos) {
  using Outcome = SettingList::Outcome;
  // Unsupported is NCCL_ALGO's "coll:list;..." form: in a selection, ';' separates nothing.
  if (list.outcome == Outcome::UnknownName || list.outcome == Outcome::Unsupported) {
    return "names an unknown algorithm '" + list.problem +
           "' (known: ring, tree, collnetdirect, collnetchain, nvls, nvlstree, pat)";
  }
  if (list.names == 0) return "names no algorithm";
  const uint32_t selectable = selectableAlgorithms(coll);
  if (selectable == 0)
    return "selects an algorithm, but the call has none to choose (it is grouped sends and receives)";
  const uint32_t left = (list.outcome == Outcome::Ok ? list.mask : 0) & selectable;
  if (left == 0) return "leaves no algorithm Chorus can run the call with (it has: " + algorithmNames(selectable) + ")";
  // The tuner intersects with NCCL_ALGO too; checked here, where the call can still be refused.
  const std::string setting = envString("NCCL_ALGO");
  if ((left & parseAlgorithmList(setting).mask) == 0) {
    return "leaves no algorithm that NCCL_ALGO=" + setting + " enables (it leaves: " + algorithmNames(left) + ")";
  }
  *algos = left;
  return "";
}

ncclResult_t readAlgSelection(const char* text, bool force, CollKind coll, const char* func, uint32_t* algos) {
  *algos = kAllAlgorithms;
  if (text == NCCL_CONFIG_UNDEF_PTR) return ncclSuccess;
  const SettingList list = parseAlgorithmList(text);
  if (list.outcome == SettingList::Outcome::Unset) return ncclSuccess;  // "" (or blanks): automatic
  const std::string problem = selectionProblem(list, coll, algos);
  if (problem.empty()) return ncclSuccess;
  if (!force) {
    INFO(kSubsysColl | kSubsysTuning, "%s: config->algSelection \"%s\" %s; forceAlgSelection is 0: automatic choice",
         func, text, problem.c_str());
    return ncclSuccess;
  }
  WARN("%s: invalid argument: config->algSelection \"%s\" %s (forceAlgSelection is 1)", func, text, problem.c_str());
  return ncclInvalidArgument;
}

// Fields Chorus accepts whatever they hold and cannot act on.
struct IntHint {
  const char* name;
  int ncclCollConfig_t::*field;
  const char* effect;
};
const IntHint kIntHints[] = {
    {"minCTAs", &ncclCollConfig_t::minCTAs,
     "no effect: a call uses every channel of its communicator unless maxCTAs bounds it"},
    {"nvlsCTAs", &ncclCollConfig_t::nvlsCTAs, "no effect: Chorus has no NVLS algorithms"},
    {"cgaClusterSize", &ncclCollConfig_t::cgaClusterSize, "no effect: Chorus' kernels use no thread-block clusters"},
    {"CTAPolicy", &ncclCollConfig_t::CTAPolicy, "no effect: Chorus has one CTA policy"},
};
constexpr uint32_t kExtBit = 1u << std::size(kIntHints);
constexpr uint32_t kEventBit = kExtBit << 1;

}  // namespace

ncclResult_t readCollConfig(const ncclCollConfig_t* config, CollKind coll, const char* func, CallTuning* out) {
  *out = CallTuning{};
  if (config == nullptr) return ncclSuccess;
  if (config->size < kMinCollConfigSize) {
    WARN(
        "%s: invalid argument: config->size is %zu, smaller than NCCL 2.31's ncclCollConfig_t (%zu bytes); "
        "initialize it with NCCL_COLLCONFIG_INITIALIZER",
        func, config->size, kMinCollConfigSize);
    return ncclInvalidArgument;
  }
  if (config->magic != NCCL_API_MAGIC) {
    WARN("%s: invalid argument: config->magic is 0x%x, expected 0x%x (initialize it with NCCL_COLLCONFIG_INITIALIZER)",
         func, config->magic, NCCL_API_MAGIC);
    return ncclInvalidArgument;
  }
  const int force = config->forceAlgSelection;  // unset means 1
  if (force != NCCL_CONFIG_UNDEF_INT && force != 0 && force != 1) {
    WARN("%s: invalid argument: config->forceAlgSelection is %d, expected 0 or 1", func, force);
    return ncclInvalidArgument;
  }
  const int policy = config->CTAPolicy;
  if (policy != NCCL_CONFIG_UNDEF_INT && (policy & ~kCtaPolicyBits) != 0) {
    WARN(
        "%s: invalid argument: config->CTAPolicy is %d, expected a mask of NCCL_CTA_POLICY_EFFICIENCY and "
        "NCCL_CTA_POLICY_ZERO (0 to %d)",
        func, policy, kCtaPolicyBits);
    return ncclInvalidArgument;
  }
  CHORUS_CHECK(readAlgSelection(config->algSelection, force != 0, coll, func, &out->algos));
  // A hint: any other value (unset, 0, negative) leaves the channels as they are.
  if (config->maxCTAs > 0) out->maxChannels = config->maxCTAs;
  return ncclSuccess;
}

void nameUnusedCollConfigFields(ncclComm* comm, const ncclCollConfig_t* config, const char* func) {
  if (config == nullptr) return;
  uint32_t set = 0;
  for (size_t i = 0; i < std::size(kIntHints); ++i)
    if (config->*kIntHints[i].field != NCCL_CONFIG_UNDEF_INT) set |= 1u << i;
  if (config->ext != nullptr) set |= kExtBit;
  // A 2.31 struct ends before the event: not read there.
  const bool hasEvent = config->size >= offsetof(ncclCollConfig_t, launchCompletionEvent) + sizeof(cudaEvent_t);
  if (hasEvent && config->launchCompletionEvent != nullptr) set |= kEventBit;
  if ((set & ~comm->collConfigFieldsNamed.load(std::memory_order_relaxed)) == 0) return;  // every call but the first
  const uint32_t fresh = set & ~comm->collConfigFieldsNamed.fetch_or(set, std::memory_order_relaxed);
  for (size_t i = 0; i < std::size(kIntHints); ++i) {
    if (fresh >> i & 1) {
      INFO(kSubsysColl, "%s: config->%s = %d: %s (said once per communicator)", func, kIntHints[i].name,
           config->*kIntHints[i].field, kIntHints[i].effect);
    }
  }
  if (fresh & kExtBit) INFO(kSubsysColl, "%s: config->ext: vendor options are ignored (said once)", func);
  if (fresh & kEventBit) {
    WARN(
        "%s: config->launchCompletionEvent %p is not recorded: Chorus does not honour it yet (said once per "
        "communicator)",
        func, static_cast<void*>(config->launchCompletionEvent));
  }
}

}  // namespace chorus
