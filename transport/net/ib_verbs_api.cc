#include "net/ib_verbs_api.h"

#if CHORUS_HAVE_IBVERBS

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace chorus {

namespace {

// Looks up one function of the opened `library` (named `libraryName` in the failure text).
template <typename Fn>
bool resolve(void* library, const char* libraryName, const char* name, Fn* out, std::string* why) {
  *out = reinterpret_cast<Fn>(dlsym(library, name));
  if (*out == nullptr) *why = std::string(name) + " not found in " + libraryName;
  return *out != nullptr;
}

}  // namespace

int IbVerbsApi::queryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const {
  // As ___ibv_query_port in verbs.h: providers with the extended op fill the whole struct.
  if (verbs_context* vctx = verbs_get_ctx_op(context, query_port)) {
    return vctx->query_port(context, port, attr, sizeof(*attr));
  }
  memset(attr, 0, sizeof(*attr));
  return queryPortCompat(context, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

bool loadIbVerbsApi(const char* library, IbVerbsApi* api, std::string* why) {
  *api = IbVerbsApi{};
  dlerror();
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *why = std::string(library) + " could not be loaded (" + (error != nullptr ? error : "unknown error") + ")";
    return false;
  }
  api->library = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  bool ok = resolve(handle, library, "ibv_get_device_list", &api->getDeviceList, why) &&
            resolve(handle, library, "ibv_free_device_list", &api->freeDeviceList, why) &&
            resolve(handle, library, "ibv_get_device_name", &api->getDeviceName, why) &&
            resolve(handle, library, "ibv_open_device", &api->openDevice, why) &&
            resolve(handle, library, "ibv_close_device", &api->closeDevice, why) &&
            resolve(handle, library, "ibv_query_device", &api->queryDevice, why) &&
            resolve(handle, library, "ibv_query_port", &api->queryPortCompat, why) &&
            resolve(handle, library, "ibv_query_gid", &api->queryGid, why) &&
            resolve(handle, library, "ibv_alloc_pd", &api->allocPd, why) &&
            resolve(handle, library, "ibv_dealloc_pd", &api->deallocPd, why) &&
            resolve(handle, library, "ibv_reg_mr", &api->regMrSymbol, why) &&
            resolve(handle, library, "ibv_dereg_mr", &api->deregMr, why) &&
            resolve(handle, library, "ibv_create_cq", &api->createCq, why) &&
            resolve(handle, library, "ibv_destroy_cq", &api->destroyCq, why) &&
            resolve(handle, library, "ibv_create_qp", &api->createQp, why) &&
            resolve(handle, library, "ibv_destroy_qp", &api->destroyQp, why) &&
            resolve(handle, library, "ibv_modify_qp", &api->modifyQp, why) &&
            resolve(handle, library, "ibv_wc_status_str", &api->wcStatusStr, why);
  if (!ok) *api = IbVerbsApi{};
  return ok;
}

const IbVerbsApi* ibVerbs(std::string* why) {
  // Loaded once and never unloaded: comms may outlive any owner we could give it.
  static std::string failure;
  static const IbVerbsApi* api = [] {
    auto* loaded = new IbVerbsApi;
    if (loadIbVerbsApi(kIbVerbsLibrary, loaded, &failure)) return static_cast<const IbVerbsApi*>(loaded);
    delete loaded;
    return static_cast<const IbVerbsApi*>(nullptr);
  }();
  if (api == nullptr && why != nullptr) *why = failure;
  return api;
}

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
