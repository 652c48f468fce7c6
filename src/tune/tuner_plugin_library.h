// Finding and opening an external tuner plugin, as NCCL does (NCCL_TUNER_PLUGIN):
//   unset        try libnccl-tuner.so, then the net plugin's library (NCCL_NET_PLUGIN's:
//                unset libnccl-net.so, a name libnccl-net-<name>.so or the name itself),
//                whose tuner NCCL also uses; finding none is normal (INFO)
//   "none"       no plugin
//   <name>       <name> as a file name or path, then libnccl-tuner-<name>.so (unless <name>
//                is a path or already lib*.so); finding none is a WARN
// The library is opened RTLD_NOW|RTLD_LOCAL and its newest table is used: ncclTunerPlugin_v6,
// _v5, _v4, then _v3. A library without any of them is a WARN (quiet for a net plugin's
// library, which need not have a tuner).
//
// Once per process per setting, as NCCL loads its tuner once: the communicators share the
// library while any uses it (it is closed with the last), and a setting that found no
// usable plugin is not tried again, so its WARN is said once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "core/shared_library.h"
#include "src/tune/tuner_plugin_abi.h"

namespace chorus {

// One of the tables a plugin may export; the pointer is never null.
using TunerTable =
    std::variant<const ncclTuner_v6_t*, const ncclTuner_v5_t*, const ncclTuner_v4_t*, const ncclTuner_v3_t*>;

// An opened plugin library and the table Chorus uses.
struct TunerPluginLibrary {
  SharedLibrary library;  // keeps the code behind `table` loaded
  std::string path;       // the file dlopen found
  std::string name;       // the table's name ("" when it has none)
  int version = 0;        // 3 to 6
  TunerTable table;
};

// The plugin `tunerSetting` (NCCL_TUNER_PLUGIN; nullopt when unset) selects, with
// `netPluginSetting` (NCCL_NET_PLUGIN) for the net plugin's library; null when there is
// none or it is unusable (logged as the header says).
std::shared_ptr<const TunerPluginLibrary> openTunerPlugin(const std::optional<std::string>& tunerSetting,
                                                          const std::optional<std::string>& netPluginSetting);

}  // namespace chorus
