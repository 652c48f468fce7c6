// Which network a process uses, chosen once, the first time a connection needs one
// (as NCCL does):
//   1. an external plugin (NCCL_NET_PLUGIN, or libnccl-net.so when that is unset),
//   2. the IB verbs net, when an HCA is usable,
//   3. the socket net.
// NCCL_NET names the one wanted ("Socket", "IB" or a plugin's name, any case); when
// none of those by that name initialises, no net is used and the reason is a WARN.
#pragma once

#include <memory>
#include <string>

#include "transport/net/net.h"

namespace chorus {

// The process's net and its label for logs ("NET/Socket"); null when none is usable.
Net* processNet();
const char* processNetLabel();

// The net a communicator asked for by name (ncclConfig_t.netName: "Socket", "IB" or a
// plugin's name), chosen once per name and kept for the process; the process's net when
// `name` is empty. Null (after a WARN) when no usable net has that name.
Net* netNamed(const std::string& name);
const char* netNamedLabel(const std::string& name);

// The choice itself, for tests: `netSetting` and `pluginSetting` as NCCL_NET and
// NCCL_NET_PLUGIN (null when unset). Returns an initialised net with devices, or null.
std::unique_ptr<Net> chooseNet(const char* netSetting, const char* pluginSetting);

}  // namespace chorus
