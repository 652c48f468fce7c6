// The libhwloc functions topology detection calls, resolved at run time: libnccl.so.2 must
// load on machines without hwloc, so nothing links against it. The library is dlopened
// once (RTLD_NOW | RTLD_LOCAL) and stays loaded for the life of the process.
//
// Only exported functions go through the table. hwloc.h's static inline helpers that call
// exported functions (hwloc_get_nbobjs_by_type, hwloc_get_next_pcidev, hwloc_bitmap_foreach...)
// would link against libhwloc, so callers use the table's members instead; inline helpers
// that only read object fields (hwloc_obj_get_info_by_name) are safe to call.
//
// Everything here needs <hwloc.h>; CHORUS_HAVE_HWLOC says whether the build had it
// (without it detection uses sysfs only). Defining CHORUS_NO_HWLOC builds that fallback
// on a machine that has the header.
#pragma once

#if __has_include(<hwloc.h>) && !defined(CHORUS_NO_HWLOC)
#define CHORUS_HAVE_HWLOC 1
#include <hwloc.h>
#else
#define CHORUS_HAVE_HWLOC 0
#endif

#include <memory>
#include <string>

namespace chorus::topo {

// The soname tried by hwlocApi(): hwloc 2.x.
inline constexpr const char* kHwlocLibrary = "libhwloc.so.15";

#if CHORUS_HAVE_HWLOC

struct HwlocApi {
  unsigned (*getApiVersion)() = nullptr;
  int (*topologyInit)(hwloc_topology_t* topology) = nullptr;
  int (*topologySetFlags)(hwloc_topology_t topology, unsigned long flags) = nullptr;
  int (*topologySetIoTypesFilter)(hwloc_topology_t topology, enum hwloc_type_filter_e filter) = nullptr;
  int (*topologyLoad)(hwloc_topology_t topology) = nullptr;
  void (*topologyDestroy)(hwloc_topology_t topology) = nullptr;
  int (*getTypeDepth)(hwloc_topology_t topology, hwloc_obj_type_t type) = nullptr;
  unsigned (*getNbobjsByDepth)(hwloc_topology_t topology, int depth) = nullptr;
  hwloc_obj_t (*getObjByDepth)(hwloc_topology_t topology, int depth, unsigned index) = nullptr;
  int (*bitmapFirst)(hwloc_const_bitmap_t bitmap) = nullptr;
  int (*bitmapNext)(hwloc_const_bitmap_t bitmap, int prev) = nullptr;

  // Keeps the library loaded while this table is alive (dlclose on destruction).
  std::shared_ptr<void> library;
};

// The process-wide table, loaded on first use; null when libhwloc, one of its functions
// or a compatible version (2.x, as the header) is missing, with `*why` saying which.
const HwlocApi* hwlocApi(std::string* why);

// Loads `library` into `*api` without caching: the work behind hwlocApi(), and a test
// hook for the failure paths. False with `*why` naming the library, symbol or version.
bool loadHwlocApi(const char* library, HwlocApi* api, std::string* why);

// A loaded topology, destroyed with the object. I/O objects are kept as
// HWLOC_TYPE_FILTER_KEEP_IMPORTANT does: GPUs, NICs, storage and the bridges above them.
// CPUs outside this process' cgroup are kept too: NCCL's affinity is the whole NUMA node's
// (sysfs cpumap), narrowed to the process' own later.
class HwlocTopology {
 public:
  HwlocTopology() = default;
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  ~HwlocTopology();

  // False with `*why` naming the hwloc call that failed.
  bool load(const HwlocApi* api, std::string* why);
  hwloc_topology_t get() const { return topology_; }

 private:
  const HwlocApi* api_ = nullptr;
  hwloc_topology_t topology_ = nullptr;
};

#endif  // CHORUS_HAVE_HWLOC

}  // namespace chorus::topo
