// Verbs objects owned with RAII (context + protection domain, CQ, QP, MR) and the
// discovery of the HCA ports the IB net may use. Destruction goes through the
// IbVerbsApi table: nothing here links against libibverbs.
#pragma once

#include "transport/net/ib_verbs_api.h"

#if CHORUS_HAVE_IBVERBS

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nccl.h"
#include "transport/net/ib_hca_list.h"
#include "transport/net/ib_port_attrs.h"

namespace chorus {

// How each owned verbs object is released; returns 0 or an errno value.
inline int ibDestroy(const IbVerbsApi& api, ibv_cq* cq) { return api.destroyCq(cq); }
inline int ibDestroy(const IbVerbsApi& api, ibv_qp* qp) { return api.destroyQp(qp); }
inline int ibDestroy(const IbVerbsApi& api, ibv_mr* mr) { return api.deregMr(mr); }
inline int ibDestroy(const IbVerbsApi& api, ibv_pd* pd) { return api.deallocPd(pd); }
inline int ibDestroy(const IbVerbsApi& api, ibv_context* context) { return api.closeDevice(context); }

// Logs a failed release (the object is gone either way from our side).
void warnIbDestroyFailed(const char* what, int error);
template <typename T>
constexpr const char* ibObjectName() {
  if constexpr (std::is_same_v<T, ibv_cq>) return "ibv_destroy_cq";
  if constexpr (std::is_same_v<T, ibv_qp>) return "ibv_destroy_qp";
  if constexpr (std::is_same_v<T, ibv_mr>) return "ibv_dereg_mr";
  if constexpr (std::is_same_v<T, ibv_pd>) return "ibv_dealloc_pd";
  return "ibv_close_device";
}

// Owns one verbs object (move-only); released through the table on destruction.
template <typename T>
class IbOwned {
 public:
  IbOwned() = default;
  IbOwned(const IbVerbsApi* api, T* object) : api_(api), object_(object) {}
  ~IbOwned() { reset(); }
  IbOwned(IbOwned&& other) noexcept : api_(other.api_), object_(std::exchange(other.object_, nullptr)) {}
  IbOwned& operator=(IbOwned&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }

  T* get() const { return object_; }
  explicit operator bool() const { return object_ != nullptr; }
  void reset() {
    if (object_ == nullptr) return;
    int error = ibDestroy(*api_, std::exchange(object_, nullptr));
    if (error != 0) warnIbDestroyFailed(ibObjectName<T>(), error);
  }

 private:
  const IbVerbsApi* api_ = nullptr;
  T* object_ = nullptr;
};

using IbCq = IbOwned<ibv_cq>;
using IbQp = IbOwned<ibv_qp>;
using IbMr = IbOwned<ibv_mr>;

// An open HCA and its protection domain, shared (refcounted) by its ports and by every
// comm and memory registration on it: the last owner closes it.
class IbDevice {
 public:
  static ncclResult_t open(const IbVerbsApi* api, ibv_device* device, std::shared_ptr<IbDevice>* out);

  const IbVerbsApi& api() const { return *api_; }
  const std::string& name() const { return name_; }
  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  const ibv_device_attr& attr() const { return attr_; }

 private:
  IbDevice(const IbVerbsApi* api, std::string name) : api_(api), name_(std::move(name)) {}

  const IbVerbsApi* api_;
  std::string name_;
  ibv_device_attr attr_{};
  IbOwned<ibv_context> context_;  // declared before pd_: released after it
  IbOwned<ibv_pd> pd_;
};

// One usable port: what getProperties reports and what connections need.
struct IbPort {
  std::shared_ptr<IbDevice> device;
  int port = 0;
  std::string name;  // "mlx5_0:1"
  uint8_t linkLayer = 0;
  uint16_t lid = 0;
  int activeMtu = 0;  // enum ibv_mtu
  int gidIndex = 0;
  GidBytes gid{};
  int speedMbps = 0;
};

// Opens every HCA and keeps its ACTIVE InfiniBand or Ethernet (RoCE) ports that pass
// `filter`. `gidIndexSetting` is NCCL_IB_GID_INDEX (-1: choose with chooseRoceGid).
// Devices and ports that cannot be used are skipped with an INFO (subsystem NET) saying
// why. `*deviceCount` is the number of HCAs listed. Fails only when the device list
// cannot be read, with `*failure` saying why (the caller logs it).
ncclResult_t discoverIbPorts(const IbVerbsApi* api, const HcaFilter& filter, int gidIndexSetting,
                             std::vector<IbPort>* ports, int* deviceCount, std::string* failure);

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
