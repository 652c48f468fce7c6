#include "transport/net/ib_device.h"

#if CHORUS_HAVE_IBVERBS

#include <cerrno>
#include <cstring>

#include "core/debug.h"
#include "transport/net/ib_net_wire.h"

namespace chorus {

static_assert(IBV_LINK_LAYER_INFINIBAND == ib_net_wire::kLinkLayerInfiniband);
static_assert(IBV_LINK_LAYER_ETHERNET == ib_net_wire::kLinkLayerEthernet);
static_assert(IBV_MTU_256 == 1 && IBV_MTU_4096 == 5, "ib_port_attrs assumes the ibv_mtu values");
static_assert(sizeof(ibv_gid) == sizeof(GidBytes));

namespace {

bool queryGid(const IbDevice& device, int port, int index, GidBytes* out) {
  ibv_gid gid{};
  if (device.api().queryGid(device.context(), static_cast<uint8_t>(port), index, &gid) != 0) return false;
  memcpy(out->data(), gid.raw, out->size());
  return true;
}

// The GID index a port's connections use, or -1 (with an INFO) when there is none.
// InfiniBand: NCCL_IB_GID_INDEX or 0; addressing is by LID and the GID only travels for
// logs. RoCE: the setting, else chooseRoceGid over the port's table.
int pickGid(const IbDevice& device, int port, const ibv_port_attr& attr, int setting, GidBytes* gid) {
  const char* name = device.name().c_str();
  if (setting >= 0 || attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    int index = setting >= 0 ? setting : 0;
    if (index >= attr.gid_tbl_len || !queryGid(device, port, index, gid) ||
        (attr.link_layer == IBV_LINK_LAYER_ETHERNET && isZeroGid(*gid))) {
      INFO(kSubsysNet, "NET/IB : %s:%d has no usable GID at NCCL_IB_GID_INDEX=%d (table of %d); skipping it", name,
           port, index, attr.gid_tbl_len);
      return -1;
    }
    return index;
  }
  std::vector<GidEntry> entries;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    GidEntry entry;
    entry.index = i;
    if (!queryGid(device, port, i, &entry.gid) || isZeroGid(entry.gid)) continue;
    entry.type = readGidType(device.name(), port, i);
    entries.push_back(entry);
  }
  int index = chooseRoceGid(entries);
  if (index < 0) {
    INFO(kSubsysNet, "NET/IB : %s:%d (RoCE) has no populated GID; skipping it", name, port);
    return -1;
  }
  for (const GidEntry& entry : entries) {
    if (entry.index == index) *gid = entry.gid;
  }
  return index;
}

// Adds the port to `ports` when it is usable; INFO says why not otherwise.
void addPortIfUsable(const std::shared_ptr<IbDevice>& device, int port, const HcaFilter& filter, int gidSetting,
                     std::vector<IbPort>* ports) {
  const char* name = device->name().c_str();
  if (!hcaSelected(filter, device->name(), port)) return;
  ibv_port_attr attr{};
  if (int error = device->api().queryPort(device->context(), static_cast<uint8_t>(port), &attr); error != 0) {
    INFO(kSubsysNet, "NET/IB : ibv_query_port(%s, %d) failed: %s; skipping it", name, port, strerror(error));
    return;
  }
  if (attr.state != IBV_PORT_ACTIVE) {
    INFO(kSubsysNet, "NET/IB : %s:%d is not active (state %d); skipping it", name, port, attr.state);
    return;
  }
  if (attr.link_layer != IBV_LINK_LAYER_INFINIBAND && attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
    INFO(kSubsysNet, "NET/IB : %s:%d has link layer %d, neither InfiniBand nor Ethernet; skipping it", name, port,
         attr.link_layer);
    return;
  }
  IbPort usable;
  usable.gidIndex = pickGid(*device, port, attr, gidSetting, &usable.gid);
  if (usable.gidIndex < 0) return;
  usable.device = device;
  usable.port = port;
  usable.name = device->name() + ":" + std::to_string(port);
  usable.linkLayer = attr.link_layer;
  usable.lid = attr.lid;
  usable.activeMtu = attr.active_mtu;
  usable.speedMbps = ibPortSpeedMbps(attr.active_speed, attr.active_width);
  ports->push_back(std::move(usable));
}

}  // namespace

void warnIbDestroyFailed(const char* what, int error) { WARN("NET/IB : %s failed: %s", what, strerror(error)); }

ncclResult_t IbDevice::open(const IbVerbsApi* api, ibv_device* device, std::shared_ptr<IbDevice>* out) {
  const char* name = api->getDeviceName(device);
  std::shared_ptr<IbDevice> opened(new IbDevice(api, name != nullptr ? name : "?"));
  opened->context_ = IbOwned<ibv_context>(api, api->openDevice(device));
  if (!opened->context_) {
    INFO(kSubsysNet, "NET/IB : ibv_open_device(%s) failed: %s", opened->name_.c_str(), strerror(errno));
    return ncclSystemError;
  }
  if (int error = api->queryDevice(opened->context(), &opened->attr_); error != 0) {
    INFO(kSubsysNet, "NET/IB : ibv_query_device(%s) failed: %s", opened->name_.c_str(), strerror(error));
    return ncclSystemError;
  }
  opened->pd_ = IbOwned<ibv_pd>(api, api->allocPd(opened->context()));
  if (!opened->pd_) {
    INFO(kSubsysNet, "NET/IB : ibv_alloc_pd(%s) failed: %s", opened->name_.c_str(), strerror(errno));
    return ncclSystemError;
  }
  *out = std::move(opened);
  return ncclSuccess;
}

ncclResult_t discoverIbPorts(const IbVerbsApi* api, const HcaFilter& filter, int gidIndexSetting,
                             std::vector<IbPort>* ports, int* deviceCount, std::string* failure) {
  ports->clear();
  int count = 0;
  ibv_device** list = api->getDeviceList(&count);
  *deviceCount = list != nullptr ? count : 0;
  if (list == nullptr) {
    *failure = std::string("ibv_get_device_list failed: ") + strerror(errno);
    return ncclSystemError;
  }
  for (int i = 0; i < count; ++i) {
    std::shared_ptr<IbDevice> device;
    if (IbDevice::open(api, list[i], &device) != ncclSuccess) continue;  // INFO said why
    for (int port = 1; port <= device->attr().phys_port_cnt; ++port) {
      addPortIfUsable(device, port, filter, gidIndexSetting, ports);
    }
  }
  api->freeDeviceList(list);  // open contexts stay valid without the list
  return ncclSuccess;
}

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
