#include "src/topo/hwloc_api.h"

#if CHORUS_HAVE_HWLOC

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/shared_library.h"

namespace chorus::topo {

bool loadHwlocApi(const char* library, HwlocApi* api, std::string* why) {
  *api = HwlocApi{};
  SharedLibrary lib;
  if (!lib.open(library, why)) return false;
  api->library = lib.handle();
  bool ok = lib.resolve("hwloc_get_api_version", &api->getApiVersion, why) &&
            lib.resolve("hwloc_topology_init", &api->topologyInit, why) &&
            lib.resolve("hwloc_topology_set_flags", &api->topologySetFlags, why) &&
            lib.resolve("hwloc_topology_set_io_types_filter", &api->topologySetIoTypesFilter, why) &&
            lib.resolve("hwloc_topology_load", &api->topologyLoad, why) &&
            lib.resolve("hwloc_topology_destroy", &api->topologyDestroy, why) &&
            lib.resolve("hwloc_get_type_depth", &api->getTypeDepth, why) &&
            lib.resolve("hwloc_get_nbobjs_by_depth", &api->getNbobjsByDepth, why) &&
            lib.resolve("hwloc_get_obj_by_depth", &api->getObjByDepth, why) &&
            lib.resolve("hwloc_bitmap_first", &api->bitmapFirst, why) &&
            lib.resolve("hwloc_bitmap_next", &api->bitmapNext, why);
  // The object structs this code reads are stable within a major version only.
  if (ok && (api->getApiVersion() >> 16) != (HWLOC_API_VERSION >> 16)) {
    char text[160];
    snprintf(text, sizeof(text), "%s has API version 0x%x, built against 0x%x (major versions differ)", library,
             api->getApiVersion(), static_cast<unsigned>(HWLOC_API_VERSION));
    *why = text;
    ok = false;
  }
  if (!ok) *api = HwlocApi{};
  return ok;
}

const HwlocApi* hwlocApi(std::string* why) {
  // Loaded once and never unloaded: detection may run again for every communicator.
  static std::string failure;
  static const HwlocApi* api = [] {
    auto* loaded = new HwlocApi;
    if (loadHwlocApi(kHwlocLibrary, loaded, &failure)) return static_cast<const HwlocApi*>(loaded);
    delete loaded;
    return static_cast<const HwlocApi*>(nullptr);
  }();
  if (api == nullptr && why != nullptr) *why = failure;
  return api;
}

HwlocTopology::~HwlocTopology() {
  if (topology_ != nullptr) api_->topologyDestroy(topology_);
}

bool HwlocTopology::load(const HwlocApi* api, std::string* why) {
  if (api == nullptr) {
    *why = "no hwloc library";
    return false;
  }
  if (topology_ != nullptr) return true;
  hwloc_topology_t topology = nullptr;
  if (api->topologyInit(&topology) != 0) {
    *why = std::string("hwloc_topology_init failed: ") + strerror(errno);
    return false;
  }
  const char* failed = nullptr;
  if (api->topologySetFlags(topology, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0) {
    failed = "hwloc_topology_set_flags(INCLUDE_DISALLOWED)";
  } else if (api->topologySetIoTypesFilter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    failed = "hwloc_topology_set_io_types_filter(KEEP_IMPORTANT)";
  } else if (api->topologyLoad(topology) != 0) {
    failed = "hwloc_topology_load";
  }
  if (failed != nullptr) {
    *why = std::string(failed) + " failed: " + strerror(errno);
    api->topologyDestroy(topology);
    return false;
  }
  api_ = api;
  topology_ = topology;
  return true;
}

}  // namespace chorus::topo

#endif  // CHORUS_HAVE_HWLOC
