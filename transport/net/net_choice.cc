#include "transport/net/net_choice.h"

#include <strings.h>

#include <cctype>
#include <map>
#include <mutex>
#include <optional>
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
    WARN("NET: no usable net named \"%s\" (NCCL_NET or config->netName; %s%s, IB and Socket are built in)", netSetting,
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

namespace {
// Nets chosen by name, never destroyed (as the process's net): connections may outlive
// their communicator's last call.
ProcessNet& namedChoice(const std::string& name) {
  static std::mutex mutex;
  static auto* chosen = new std::map<std::string, ProcessNet*>();
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = name;
  for (char& c : key) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  auto it = chosen->find(key);
  if (it != chosen->end()) return *it->second;
  auto* c = new ProcessNet();
  const std::optional<std::string> pluginSetting = envValue("NCCL_NET_PLUGIN");
  c->net = chooseNet(name.c_str(), pluginSetting ? pluginSetting->c_str() : nullptr);
  if (c->net) {
    c->label = std::string("NET/") + c->net->name();
    INFO(kSubsysNet | kSubsysInit, "Using network %s for communicators that ask for \"%s\"", c->net->name(),
         name.c_str());
  }
  chosen->emplace(key, c);
  return *c;
}

bool isProcessNet(const std::string& name) {
  const Net* net = processNet();
  return name.empty() || (net != nullptr && strcasecmp(net->name(), name.c_str()) == 0);
}
}  // namespace

Net* netNamed(const std::string& name) { return isProcessNet(name) ? processNet() : namedChoice(name).net.get(); }

const char* netNamedLabel(const std::string& name) {
  return isProcessNet(name) ? processNetLabel() : namedChoice(name).label.c_str();
}

}  // namespace chorus
