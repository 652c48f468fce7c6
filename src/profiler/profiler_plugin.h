// An NCCL profiler plugin: finding and loading its library (NCCL_PROFILER_PLUGIN), and
// calling its table, whichever version it exports, in the newest version's terms (an
// event is described as a v7 descriptor and translated for a v6, v5 or v4 table).
//
// Lookup, as NCCL 2.25-2.30 do it:
//   unset                   libnccl-profiler.so (not finding it is normal: INFO only)
//   "none"                  no plugin
//   a path, or lib*.so      that file
//   any other <name>        <name>, then libnccl-profiler-<name>.so
// The library is opened RTLD_NOW|RTLD_LOCAL; ncclProfiler_v7, _v6, _v5, then _v4 is looked
// up and the first found is used. (NCCL also looks for a profiler table in the net
// plugin's library when no profiler library is found; Chorus does not.)
#pragma once

#include <memory>
#include <string>

#include "core/shared_library.h"
#include "src/profiler/profiler_abi.h"

namespace chorus {

class ProfilerPlugin {
 public:
  // The tables a library exports; the plugin uses the newest.
  struct Tables {
    const ncclProfiler_v4_t* v4 = nullptr;
    const ncclProfiler_v5_t* v5 = nullptr;
    const ncclProfiler_v6_t* v6 = nullptr;
    const ncclProfiler_v7_t* v7 = nullptr;
  };
  // One table at least is non-null; `library` keeps the code behind them loaded.
  ProfilerPlugin(SharedLibrary library, std::string path, const Tables& tables);
  ProfilerPlugin(const ProfilerPlugin&) = delete;
  ProfilerPlugin& operator=(const ProfilerPlugin&) = delete;

  const std::string& name() const { return name_; }  // the table's name
  const std::string& path() const { return path_; }  // the library, as found
  int version() const { return version_; }           // 4 to 7

  // The table's init for one communicator: sets *context and the activation mask. An error
  // is the plugin's own (the caller runs that communicator without it).
  ncclResult_t init(void** context, uint64_t commHash, const char* commName, int nNodes, int nranks, int rank);
  // Starts the event `descr` describes; *handle is the plugin's handle, or null when the
  // plugin dropped the event or its version has no such event (v4: the API events). The
  // plugin's errors are ignored, as NCCL ignores them: profiling never changes a call.
  void startEvent(void* context, void** handle, ncclProfilerEventDescr_v7_t& descr) const;
  void stopEvent(void* handle) const;  // null: nothing to stop
  void recordEventState(void* handle, ncclProfilerEventState_t state,
                        ncclProfilerEventStateArgs_v7_t* args = nullptr) const;
  void finalize(void* context) const;

  // The events the plugin asked for (ncclProfile* bits): what its init wrote, or what it
  // wrote since through the pointer init got (NCCL allows a plugin to change it at run time).
  int activationMask() const { return __atomic_load_n(&mask_, __ATOMIC_RELAXED); }

 private:
  // Calls f(table) on the newest table; for the calls whose signature all versions share.
  template <typename F>
  void call(F&& f) const {
    if (t_.v7) {
      f(*t_.v7);
    } else if (t_.v6) {
      f(*t_.v6);
    } else if (t_.v5) {
      f(*t_.v5);
    } else {
      f(*t_.v4);
    }
  }

  SharedLibrary library_;
  std::string path_;
  std::string name_;
  Tables t_;
  int version_;
  int mask_ = 0;  // written by the plugin, from any thread
};

// Loads the plugin `setting` (NCCL_PROFILER_PLUGIN's value; null when unset) selects. No
// plugin is not an error: null, with an INFO line. A library that cannot be loaded when
// named, or that is found but unusable (no known table, a table without a needed call),
// is one WARN naming the file and the cause, and null.
std::shared_ptr<ProfilerPlugin> loadProfilerPlugin(const char* setting);

// The process's plugin, for a communicator being set up: loaded by the first and shared
// while any communicator holds it, so the library is closed with the last (as NCCL does).
// A setting that failed to load is not tried again (its WARN is not repeated) until
// NCCL_PROFILER_PLUGIN changes.
std::shared_ptr<ProfilerPlugin> sharedProfilerPlugin();

}  // namespace chorus
