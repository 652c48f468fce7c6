#include "transport/net/ib_verbs_api.h"

#if CHORUS_HAVE_IBVERBS

#include <cstring>
#include <mutex>

#include "core/shared_library.h"

namespace chorus {

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
  SharedLibrary lib;
  if (!lib.open(library, why)) return false;
  api->library = lib.handle();
  bool ok = lib.resolve("ibv_get_device_list", &api->getDeviceList, why) &&
            lib.resolve("ibv_free_device_list", &api->freeDeviceList, why) &&
            lib.resolve("ibv_get_device_name", &api->getDeviceName, why) &&
            lib.resolve("ibv_open_device", &api->openDevice, why) &&
            lib.resolve("ibv_close_device", &api->closeDevice, why) &&
            lib.resolve("ibv_query_device", &api->queryDevice, why) &&
            lib.resolve("ibv_query_port", &api->queryPortCompat, why) &&
            lib.resolve("ibv_query_gid", &api->queryGid, why) && lib.resolve("ibv_alloc_pd", &api->allocPd, why) &&
            lib.resolve("ibv_dealloc_pd", &api->deallocPd, why) && lib.resolve("ibv_reg_mr", &api->regMrSymbol, why) &&
            lib.resolve("ibv_dereg_mr", &api->deregMr, why) && lib.resolve("ibv_create_cq", &api->createCq, why) &&
            lib.resolve("ibv_destroy_cq", &api->destroyCq, why) && lib.resolve("ibv_create_qp", &api->createQp, why) &&
            lib.resolve("ibv_destroy_qp", &api->destroyQp, why) && lib.resolve("ibv_modify_qp", &api->modifyQp, why) &&
            lib.resolve("ibv_wc_status_str", &api->wcStatusStr, why);
  if (!ok) {
    *api = IbVerbsApi{};
    return false;
  }
  std::string absent;  // optional: an older rdma-core lacks it
  if (!lib.resolve("ibv_reg_dmabuf_mr", &api->regDmabufMr, &absent)) api->regDmabufMr = nullptr;
  return true;
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
