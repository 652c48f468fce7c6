// The libibverbs functions the IB net calls, resolved at run time: libnccl.so.2 must load
// on machines without rdma-core, so nothing links against libibverbs. The library is
// dlopened once (RTLD_NOW | RTLD_LOCAL) and stays loaded for the life of the process.
//
// Only exported functions go through the table. The header's static inline
// ibv_post_send, ibv_post_recv and ibv_poll_cq call through context->ops and need no
// symbol; ibv_query_port and ibv_reg_mr are macros in verbs.h, so callers use
// IbVerbsApi::queryPort and IbVerbsApi::regMr instead.
//
// Everything here needs <infiniband/verbs.h>; CHORUS_HAVE_IBVERBS says whether the build
// had it (without it the IB net only reports that it is unavailable). Defining
// CHORUS_NO_IBVERBS builds that fallback on a machine that has the header.
#pragma once

#if __has_include(<infiniband/verbs.h>) && !defined(CHORUS_NO_IBVERBS)
#define CHORUS_HAVE_IBVERBS 1
#include <infiniband/verbs.h>
#else
#define CHORUS_HAVE_IBVERBS 0
#endif

#include <memory>
#include <string>

namespace chorus {

// The soname tried by ibVerbs().
inline constexpr const char* kIbVerbsLibrary = "libibverbs.so.1";

#if CHORUS_HAVE_IBVERBS

struct IbVerbsApi {
  ibv_device** (*getDeviceList)(int* count) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  int (*queryPortCompat)(ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMrSymbol)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;
  // rdma-core 34 and later; null before (GPU memory then registers through nvidia-peermem only).
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) = nullptr;

  // What verbs.h's ibv_query_port macro does, through the table.
  int queryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) const;
  ibv_mr* regMr(ibv_pd* pd, void* addr, size_t length, int access) const {
    return regMrSymbol(pd, addr, length, access);
  }

  // Keeps the library loaded while this table is alive (dlclose on destruction).
  std::shared_ptr<void> library;
};

// The process-wide table, loaded on first use; null when libibverbs or one of its
// functions is missing, with `*why` saying which (for the caller's one INFO line).
const IbVerbsApi* ibVerbs(std::string* why);

// Loads `library` into `*api` without caching: the work behind ibVerbs(), and a test
// hook for the failure paths. False with `*why` naming the library or missing symbol.
bool loadIbVerbsApi(const char* library, IbVerbsApi* api, std::string* why);

#endif  // CHORUS_HAVE_IBVERBS

}  // namespace chorus
