// Finding an external tuner plugin and its newest table; one library per process and setting.
#include "src/tune/tuner_plugin_library.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "core/debug.h"

namespace chorus {
namespace {

constexpr uint64_t kSubsys = kSubsysInit | kSubsysTuning;

std::optional<std::string> nonEmpty(const std::optional<std::string>& setting) {
  return setting && !setting->empty() ? setting : std::nullopt;
}

// NCCL's rule: a setting that is neither a path nor already a library file name
// (lib*.so) also names libnccl-tuner-<setting>.so, tried after the setting itself.
std::vector<std::string> tunerFiles(const std::string& setting) {
  const bool isFile =
      setting.find('/') != std::string::npos || (setting.starts_with("lib") && setting.ends_with(".so"));
  if (isFile) return {setting};
  return {setting, "libnccl-tuner-" + setting + ".so"};
}

// The files the net plugin loader (transport/net/net_plugin.cc) tries for NCCL_NET_PLUGIN.
std::vector<std::string> netPluginFiles(const std::optional<std::string>& netSetting) {
  if (!netSetting) return {"libnccl-net.so"};
  if (strcasecmp(netSetting->c_str(), "none") == 0) return {};
  return {"libnccl-net-" + *netSetting + ".so", *netSetting};
}

// Opens the first of `files` that loads; `failures` collects dlerror()'s texts (each names its file).
std::optional<SharedLibrary> openFirst(const std::vector<std::string>& files, std::string* failures) {
  for (const std::string& file : files) {
    SharedLibrary library;
    std::string why;
    if (library.open(file.c_str(), &why)) return library;
    *failures += (failures->empty() ? "" : "; ") + why;
  }
  return std::nullopt;
}

// The file the dynamic linker found (a bare name may have been searched for).
std::string loadedPath(const SharedLibrary& library, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(library.handle().get(), RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

template <typename Table>
bool findTable(const SharedLibrary& library, const char* symbol, int version, TunerTable* table, int* found) {
  const Table* t = nullptr;
  std::string ignored;
  if (!library.resolve(symbol, &t, &ignored)) return false;
  *table = t;
  *found = version;
  return true;
}

// The call Chorus needs that the table lacks, or nullptr.
const char* missingCall(const TunerTable& table) {
  return std::visit(
      [](const auto* t) -> const char* {
        if (t->init == nullptr) return "init";
        if (t->getCollInfo == nullptr) return "getCollInfo";
        if constexpr (requires { t->finalize; }) {
          if (t->finalize == nullptr) return "finalize";
        } else {
          if (t->destroy == nullptr) return "destroy";
        }
        return nullptr;
      },
      table);
}

// The library's newest table; null (logged) when it has none Chorus can use. `requested`:
// the user named this library, so its lacking a tuner is worth a WARN.
std::shared_ptr<const TunerPluginLibrary> withTable(SharedLibrary library, const std::string& file, bool requested) {
  auto plugin = std::make_shared<TunerPluginLibrary>();
  plugin->path = loadedPath(library, file);
  int version = 0;
  TunerTable table;
  if (!findTable<ncclTuner_v6_t>(library, NCCL_TUNER_PLUGIN_SYMBOL_V6, 6, &table, &version) &&
      !findTable<ncclTuner_v5_t>(library, NCCL_TUNER_PLUGIN_SYMBOL_V5, 5, &table, &version) &&
      !findTable<ncclTuner_v4_t>(library, NCCL_TUNER_PLUGIN_SYMBOL_V4, 4, &table, &version) &&
      !findTable<ncclTuner_v3_t>(library, NCCL_TUNER_PLUGIN_SYMBOL_V3, 3, &table, &version)) {
    if (requested) {
      WARN("TUNER/Plugin: %s exports none of %s, %s, %s, %s; using Chorus' own tuning", plugin->path.c_str(),
           NCCL_TUNER_PLUGIN_SYMBOL_V6, NCCL_TUNER_PLUGIN_SYMBOL_V5, NCCL_TUNER_PLUGIN_SYMBOL_V4,
           NCCL_TUNER_PLUGIN_SYMBOL_V3);
    } else {
      INFO(kSubsys, "TUNER/Plugin: %s has no tuner table (ncclTunerPlugin_v6 to _v3)", plugin->path.c_str());
    }
    return nullptr;
  }
  if (const char* missing = missingCall(table)) {
    WARN("TUNER/Plugin: %s: ncclTunerPlugin_v%d has no %s; using Chorus' own tuning", plugin->path.c_str(), version,
         missing);
    return nullptr;
  }
  const char* name = std::visit([](const auto* t) { return t->name; }, table);
  plugin->name = name != nullptr ? name : "";
  plugin->version = version;
  plugin->table = table;
  plugin->library = std::move(library);
  INFO(kSubsys, "TUNER/Plugin: Using %s (ncclTunerPlugin_v%d) from %s", plugin->name.c_str(), version,
       plugin->path.c_str());
  return plugin;
}

std::shared_ptr<const TunerPluginLibrary> load(const std::optional<std::string>& tuner,
                                               const std::optional<std::string>& netPlugin) {
  std::string failures;
  if (tuner) {
    if (strcasecmp(tuner->c_str(), "none") == 0) {
      INFO(kSubsys, "TUNER/Plugin: NCCL_TUNER_PLUGIN=none, no plugin loaded");
      return nullptr;
    }
    const std::vector<std::string> files = tunerFiles(*tuner);
    std::optional<SharedLibrary> library = openFirst(files, &failures);
    if (!library) {
      WARN("TUNER/Plugin: NCCL_TUNER_PLUGIN=%s: could not load the plugin (%s); using Chorus' own tuning",
           tuner->c_str(), failures.c_str());
      return nullptr;
    }
    return withTable(std::move(*library), files.front(), true);
  }
  // Unset: the default library, then the net plugin's library, quietly.
  if (std::optional<SharedLibrary> library = openFirst({"libnccl-tuner.so"}, &failures)) {
    return withTable(std::move(*library), "libnccl-tuner.so", false);
  }
  for (const std::string& file : netPluginFiles(netPlugin)) {
    std::string netFailure;
    if (std::optional<SharedLibrary> library = openFirst({file}, &netFailure)) {
      return withTable(std::move(*library), file, false);
    }
  }
  INFO(kSubsys, "TUNER/Plugin: no plugin found (%s); using Chorus' own tuning", failures.c_str());
  return nullptr;
}

struct LoadedPlugins {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<const TunerPluginLibrary>> bySetting;
  std::set<std::string> unusable;  // settings that found no usable plugin: not tried again
};

LoadedPlugins& loadedPlugins() {
  static auto* plugins = new LoadedPlugins();  // never destroyed: communicators may outlive static destructors
  return *plugins;
}

}  // namespace

std::shared_ptr<const TunerPluginLibrary> openTunerPlugin(const std::optional<std::string>& tunerSetting,
                                                          const std::optional<std::string>& netPluginSetting) {
  const std::optional<std::string> tuner = nonEmpty(tunerSetting);
  const std::optional<std::string> netPlugin = nonEmpty(netPluginSetting);
  // The net plugin's setting matters only when the tuner's is unset.
  const std::string key = tuner ? "tuner:" + *tuner : netPlugin ? "net:" + *netPlugin : "unset";
  LoadedPlugins& plugins = loadedPlugins();
  std::lock_guard<std::mutex> lock(plugins.mutex);
  if (plugins.unusable.count(key) != 0) return nullptr;
  if (auto plugin = plugins.bySetting[key].lock()) return plugin;
  std::shared_ptr<const TunerPluginLibrary> plugin = load(tuner, netPlugin);
  if (plugin == nullptr) {
    plugins.unusable.insert(key);
  } else {
    plugins.bySetting[key] = plugin;
  }
  return plugin;
}

}  // namespace chorus
