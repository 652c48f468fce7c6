#include "transport/net/net_choice.h"

#include <strings.h>

#include <mutex>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "transport/net/ib_net.h"
#include "transport/net/net_plugin.h"
#include "transport/net/socket_net.h"

namespace chorus {
namespace {

// Initialises `net`; true when it works and has a device.
bool usable(Net& net) {
  if (net.init() != ncclSuccess) return false;
  int devices = 0;
  if (net.devices(&devices) != ncclSuccess || devices < 1) {
    INFO(kSubsysNet | kSubsysInit, "NET/%s : no devices", net.name());
    return false;
  }
  return true;
}

bool named(const Net& net, const char* wanted) { return wanted == nullptr || strcasecmp(net.name(), wanted) == 0; }

}  // namespace

std::unique_ptr<Net> chooseNet(const char* netSetting, const char* pluginSetting) {
  if (netSetting != nullptr && netSetting[0] == '\0') netSetting = nullptr;
  std::unique_ptr<Net> plugin;
  loadNetPlugin(pluginSetting, &plugin);
  if (plugin && named(*plugin, netSetting) && usable(*plugin)) return plugin;

  std::vector<std::unique_ptr<Net>> builtIn;
  if (envInt("NCCL_IB_DISABLE", 0) == 0) {
    builtIn.push_back(makeIbNet());
  } else {
    INFO(kSubsysNet | kSubsysInit, "NET/IB : disabled by NCCL_IB_DISABLE");
  }
  builtIn.push_back(std::make_unique<SocketNet>());
  for (auto& net : builtIn) {
    if (named(*net, netSetting) && usable(*net)) return std::move(net);
  }
  if (netSetting != nullptr) {
    WARN("NET: NCCL_NET=%s: no usable net by that name (%s%s, IB and Socket are built in)", netSetting,
         plugin ? "plugin " : "no plugin", plugin ? plugin->name() : "");
  } else {
    WARN("NET: no usable network (no plugin, no HCA, and the socket net found no interface)");
  }
  return nullptr;
}

namespace {
struct ProcessNet {
  std::unique_ptr<Net> net;
  std::string label = "NET";
};
// Never destroyed: the proxy thread may still use the net while static destructors run.
ProcessNet& processChoice() {
  static ProcessNet* choice = [] {
    auto* c = new ProcessNet();
    const std::optional<std::string> netSetting = envValue("NCCL_NET");
    const std::optional<std::string> pluginSetting = envValue("NCCL_NET_PLUGIN");
    c->net = chooseNet(netSetting ? netSetting->c_str() : nullptr, pluginSetting ? pluginSetting->c_str() : nullptr);
    if (c->net) {
      c->label = std::string("NET/") + c->net->name();
      INFO(kSubsysNet | kSubsysInit, "Using network %s", c->net->name());
    }
    return c;
  }();
  return *choice;
}
}  // namespace

Net* processNet() { return processChoice().net.get(); }
const char* processNetLabel() { return processChoice().label.c_str(); }

}  // namespace chorus
