// Loading an NCCL profiler plugin and calling its table in v6's terms.
#include "src/profiler/profiler_plugin.h"

#include <strings.h>

#include <mutex>
#include <optional>
#include <vector>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

// The calls Chorus makes; a table lacking one is refused. recordEventState may be null
// (the only events Chorus updates are the GroupApi ones, which then go without).
template <typename Table>
const char* missingCall(const Table& t) {
  if (t.init == nullptr) return "init";
  if (t.startEvent == nullptr) return "startEvent";
  if (t.stopEvent == nullptr) return "stopEvent";
  if (t.finalize == nullptr) return "finalize";
  return nullptr;
}

// NCCL's rule: a path or a library file name is only itself; a bare name is tried as
// itself, then as libnccl-profiler-<name>.so.
std::vector<std::string> candidateFiles(const char* setting) {
  if (setting == nullptr || setting[0] == '\0') return {"libnccl-profiler.so"};
  const std::string name = setting;
  const bool isPath = name.find('/') != std::string::npos;
  const bool isLibraryFile = name.starts_with("lib") && name.ends_with(".so");
  if (isPath || isLibraryFile) return {name};
  return {name, "libnccl-profiler-" + name + ".so"};
}

// v4 knows the group, coll, p2p, proxy op, step and ctrl, and kernel channel events; a coll's or p2p's parent is the
// group event, which v5 moved to coll.parentGroup / p2p.parentGroup. False: v4 has no such
// event.
bool toV4(const ncclProfilerEventDescr_v7_t& d, ncclProfilerEventDescr_v4_t* out) {
  *out = ncclProfilerEventDescr_v4_t{};
  out->type = static_cast<uint8_t>(d.type);
  out->rank = d.rank;
  switch (d.type) {
    case ncclProfileGroup:
      out->parentObj = d.parentObj;
      return true;
    case ncclProfileColl:
      out->parentObj = d.coll.parentGroup;
      out->coll = {d.coll.seqNumber, d.coll.func,      d.coll.sendBuff, d.coll.recvBuff, d.coll.count, d.coll.root,
                   d.coll.datatype,  d.coll.nChannels, d.coll.nWarps,   d.coll.algo,     d.coll.proto};
      return true;
    case ncclProfileP2p:
      out->parentObj = d.p2p.parentGroup;
      out->p2p = {d.p2p.func, d.p2p.buff, d.p2p.datatype, d.p2p.count, d.p2p.peer, d.p2p.nChannels};
      return true;
    case ncclProfileKernelCh:
      out->parentObj = d.parentObj;
      out->kernelCh = d.kernelCh;
      return true;
    case ncclProfileProxyOp:
      out->parentObj = d.parentObj;
      out->proxyOp = d.proxyOp;
      return true;
    case ncclProfileProxyStep:
      out->parentObj = d.parentObj;
      out->proxyStep = d.proxyStep;
      return true;
    case ncclProfileProxyCtrl:
      return true;
    default:
      return false;
  }
}

// v5 and v6 have v7's members without the fields v7 appended (the tag, the kernel variant).
template <typename Descr>
bool toV5Shape(const ncclProfilerEventDescr_v7_t& d, Descr* out) {
  *out = Descr{};
  out->type = d.type;
  out->parentObj = d.parentObj;
  out->rank = d.rank;
  switch (d.type) {
    case ncclProfileGroup:
      return true;
    case ncclProfileGroupApi:
      out->groupApi = d.groupApi;
      return true;
    case ncclProfileCollApi: {
      const auto& a = d.collApi;
      out->collApi = {a.func, a.count, a.datatype, a.root, a.stream, a.graphCaptured};
      return true;
    }
    case ncclProfileP2pApi: {
      const auto& a = d.p2pApi;
      out->p2pApi = {a.func, a.count, a.datatype, a.stream, a.graphCaptured};
      return true;
    }
    case ncclProfileColl: {
      const auto& c = d.coll;
      out->coll = {c.seqNumber, c.func,      c.sendBuff, c.recvBuff, c.count, c.root,
                   c.datatype,  c.nChannels, c.nWarps,   c.algo,     c.proto, c.parentGroup};
      return true;
    }
    case ncclProfileP2p: {
      const auto& p = d.p2p;
      out->p2p = {p.func, p.buff, p.datatype, p.count, p.peer, p.nChannels, p.parentGroup};
      return true;
    }
    case ncclProfileKernelCh:
      out->kernelCh = d.kernelCh;
      return true;
    case ncclProfileProxyOp:
      out->proxyOp = d.proxyOp;
      return true;
    case ncclProfileProxyStep:
      out->proxyStep = d.proxyStep;
      return true;
    case ncclProfileProxyCtrl:
      return true;
    default:
      return false;  // the events Chorus does not emit are not translated
  }
}

// NCCL_PROFILER_PLUGIN as last loaded (or failed), and the plugin it gave.
struct SharedState {
  std::mutex mutex;
  std::optional<std::string> setting;  // nullopt: unset
  bool tried = false;
  bool failed = false;  // the last attempt with `setting` gave nothing
  std::weak_ptr<ProfilerPlugin> plugin;
};

SharedState& sharedState() {
  static SharedState* state = new SharedState;  // never destroyed: communicators may outlive statics
  return *state;
}

}  // namespace

ProfilerPlugin::ProfilerPlugin(SharedLibrary library, std::string path, const Tables& tables)
    : library_(std::move(library)), path_(std::move(path)), t_(tables) {
  version_ = t_.v7 ? 7 : t_.v6 ? 6 : t_.v5 ? 5 : 4;
  const char* tableName = t_.v7 ? t_.v7->name : t_.v6 ? t_.v6->name : t_.v5 ? t_.v5->name : t_.v4->name;
  name_ = tableName != nullptr ? tableName : "";
}

ncclResult_t ProfilerPlugin::init(void** context, uint64_t commHash, const char* commName, int nNodes, int nranks,
                                  int rank) {
  ncclDebugLogger_t logger = &pluginLogger<kSubsysProfile>;
  if (t_.v7) return t_.v7->init(context, commHash, &mask_, commName, nNodes, nranks, rank, logger);
  if (t_.v6) return t_.v6->init(context, commHash, &mask_, commName, nNodes, nranks, rank, logger);
  if (t_.v5) return t_.v5->init(context, commHash, &mask_, commName, nNodes, nranks, rank, logger);
  return t_.v4->init(context, &mask_, commName, commHash, nNodes, nranks, rank, logger);
}

void ProfilerPlugin::startEvent(void* context, void** handle, ncclProfilerEventDescr_v7_t& descr) const {
  *handle = nullptr;
  if (t_.v7) {
    t_.v7->startEvent(context, handle, &descr);
  } else if (t_.v6) {
    ncclProfilerEventDescr_v6_t d6;
    if (toV5Shape(descr, &d6)) t_.v6->startEvent(context, handle, &d6);
  } else if (t_.v5) {
    ncclProfilerEventDescr_v5_t d5;
    if (toV5Shape(descr, &d5)) t_.v5->startEvent(context, handle, &d5);
  } else if (ncclProfilerEventDescr_v4_t d4; toV4(descr, &d4)) {
    t_.v4->startEvent(context, handle, &d4);
  }
}

void ProfilerPlugin::stopEvent(void* handle) const {
  if (handle == nullptr) return;
  call([&](const auto& table) { table.stopEvent(handle); });
}

void ProfilerPlugin::recordEventState(void* handle, ncclProfilerEventState_t state,
                                      ncclProfilerEventStateArgs_v7_t* args) const {
  if (handle == nullptr) return;
  call([&](const auto& table) {
    if (table.recordEventState != nullptr) table.recordEventState(handle, state, args);  // one union in v4-v7
  });
}

void ProfilerPlugin::finalize(void* context) const {
  call([&](const auto& table) { table.finalize(context); });
}

std::shared_ptr<ProfilerPlugin> loadProfilerPlugin(const char* setting) {
  const bool isExplicit = setting != nullptr && setting[0] != '\0';
  if (isExplicit && strcasecmp(setting, "none") == 0) {
    INFO(kSubsysInit | kSubsysProfile, "PROFILER/Plugin: NCCL_PROFILER_PLUGIN=none, no plugin loaded");
    return nullptr;
  }
  SharedLibrary library;
  std::string path;
  std::string failures;
  for (const std::string& candidate : candidateFiles(setting)) {
    std::string why;
    if (library.open(candidate.c_str(), &why)) {
      path = candidate;
      break;
    }
    failures += (failures.empty() ? "" : "; ") + why;
  }
  if (path.empty()) {
    if (isExplicit) {
      WARN("PROFILER/Plugin: NCCL_PROFILER_PLUGIN=%s: %s; running without a profiler plugin", setting,
           failures.c_str());
    } else {
      INFO(kSubsysInit | kSubsysProfile, "PROFILER/Plugin: no plugin found (%s)", failures.c_str());
    }
    return nullptr;
  }
  std::string unused;
  ProfilerPlugin::Tables t;
  if (!library.resolve(NCCL_PROFILER_SYMBOL_V7, &t.v7, &unused) &&
      !library.resolve(NCCL_PROFILER_SYMBOL_V6, &t.v6, &unused) &&
      !library.resolve(NCCL_PROFILER_SYMBOL_V5, &t.v5, &unused))
    library.resolve(NCCL_PROFILER_SYMBOL_V4, &t.v4, &unused);
  if (!t.v7 && !t.v6 && !t.v5 && !t.v4) {
    WARN(
        "PROFILER/Plugin: %s exports none of %s, %s, %s, %s (the v1-v3 tables of NCCL 2.23-2.26 are not "
        "supported); running without a profiler plugin",
        path.c_str(), NCCL_PROFILER_SYMBOL_V7, NCCL_PROFILER_SYMBOL_V6, NCCL_PROFILER_SYMBOL_V5,
        NCCL_PROFILER_SYMBOL_V4);
    return nullptr;
  }
  const char* missing = t.v7   ? missingCall(*t.v7)
                        : t.v6 ? missingCall(*t.v6)
                        : t.v5 ? missingCall(*t.v5)
                               : missingCall(*t.v4);
  const int version = t.v7 ? 7 : t.v6 ? 6 : t.v5 ? 5 : 4;
  if (missing != nullptr) {
    WARN("PROFILER/Plugin: %s: ncclProfiler_v%d has no %s; running without a profiler plugin", path.c_str(), version,
         missing);
    return nullptr;
  }
  auto plugin = std::make_shared<ProfilerPlugin>(std::move(library), path, t);
  INFO(kSubsysInit | kSubsysProfile, "PROFILER/Plugin: loaded %s: profiler '%s', ncclProfiler_v%d", path.c_str(),
       plugin->name().c_str(), version);
  return plugin;
}

std::shared_ptr<ProfilerPlugin> sharedProfilerPlugin() {
  SharedState& state = sharedState();
  const std::optional<std::string> setting = envValue("NCCL_PROFILER_PLUGIN");
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.tried && state.setting == setting) {
    if (state.failed) return nullptr;
    if (std::shared_ptr<ProfilerPlugin> plugin = state.plugin.lock()) return plugin;
  }
  std::shared_ptr<ProfilerPlugin> plugin = loadProfilerPlugin(setting ? setting->c_str() : nullptr);
  state.setting = setting;
  state.tried = true;
  state.failed = plugin == nullptr;
  state.plugin = plugin;
  return plugin;
}

}  // namespace chorus
