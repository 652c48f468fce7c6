// A test net plugin: NCCL's plugin ABI over Chorus' SocketNet, exported as
// ncclNetPlugin_v8, or as ncclNetPlugin_v10 when built with CHORUS_TEST_NET_PLUGIN_V10.
// It lets the loader and NetPluginAdapter be tested through a real dlopen'ed library.
#include <climits>
#include <map>
#include <memory>
#include <string>

#include "core/debug.h"
#include "transport/net/net_plugin_abi.h"
#include "transport/net/socket_net.h"

namespace {

// Never deleted: NCCL does not tell a plugin it is being unloaded, so like real plugins
// this one releases a comm only when it is closed (the adapter's destructor test relies on it).
chorus::SocketNet* net = nullptr;
// getProperties hands out char*: the strings live here until the library is unloaded.
std::map<int, std::unique_ptr<chorus::NetProperties>> properties;

// Chorus' logging inside the plugin goes to the host's logger, as a plugin's must (its own
// copy would open the host's NCCL_DEBUG_FILE a second time and overwrite its lines).
ncclDebugLogger_t hostLogger = nullptr;

void logToHost(chorus::LogLevel level, uint64_t subsys, const char* file, int line, const char* text) {
  if (hostLogger == nullptr) return;
  const ncclDebugLogLevel hostLevel = level == chorus::LogLevel::Warn ? NCCL_LOG_WARN : NCCL_LOG_INFO;
  hostLogger(hostLevel, static_cast<unsigned long>(subsys), file, line, "%s", text);
}

ncclResult_t pluginInit(ncclDebugLogger_t logFunction) {
  hostLogger = logFunction;
  if (logFunction != nullptr) chorus::setLogSink(logToHost);
  if (net == nullptr) {
    auto created = std::make_unique<chorus::SocketNet>();
    ncclResult_t result = created->init();
    if (result != ncclSuccess) return result;
    net = created.release();
  }
  if (logFunction != nullptr) logFunction(NCCL_LOG_INFO, NCCL_NET, __FILE__, __LINE__, "chorustest plugin ready");
  return ncclSuccess;
}

ncclResult_t pluginDevices(int* ndev) { return net ? net->devices(ndev) : ncclInternalError; }

template <typename Props>
ncclResult_t pluginGetProperties(int dev, Props* props) {
  if (net == nullptr || props == nullptr) return ncclInternalError;
  auto stored = std::make_unique<chorus::NetProperties>();
  ncclResult_t result = net->getProperties(dev, stored.get());
  if (result != ncclSuccess) return result;
  *props = Props{};
  props->name = stored->name.data();
  props->pciPath = stored->pciPath.empty() ? nullptr : stored->pciPath.data();
  props->guid = stored->guid;
  props->ptrSupport = stored->ptrSupport;
  props->speed = stored->speed;
  props->port = stored->port;
  props->latency = stored->latency;
  props->maxComms = stored->maxComms;
  props->maxRecvs = stored->maxRecvs;
  properties[dev] = std::move(stored);
  return ncclSuccess;
}

ncclResult_t pluginListen(int dev, void* handle, void** listenComm) {
  return net->listen(dev, handle, reinterpret_cast<chorus::NetListenComm**>(listenComm));
}

[[maybe_unused]] ncclResult_t pluginConnect(int dev, void* handle, void** sendComm,
                                            ncclNetDeviceHandle_v8_t** sendDevComm) {
  if (sendDevComm != nullptr && *sendDevComm != nullptr) return ncclInvalidArgument;  // no device offload
  return net->connect(dev, handle, reinterpret_cast<chorus::NetSendComm**>(sendComm));
}

ncclResult_t pluginAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm) {
  if (recvDevComm != nullptr && *recvDevComm != nullptr) return ncclInvalidArgument;
  return net->accept(static_cast<chorus::NetListenComm*>(listenComm),
                     reinterpret_cast<chorus::NetRecvComm**>(recvComm));
}

ncclResult_t pluginRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return net->regMr(comm, data, size, type, reinterpret_cast<chorus::NetMemHandle**>(mhandle));
}

ncclResult_t pluginDeregMr(void* comm, void* mhandle) {
  return net->deregMr(comm, static_cast<chorus::NetMemHandle*>(mhandle));
}

ncclResult_t pluginIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (size > INT_MAX) return ncclInvalidArgument;
  return net->isend(static_cast<chorus::NetSendComm*>(sendComm), data, static_cast<int>(size), tag,
                    static_cast<chorus::NetMemHandle*>(mhandle), reinterpret_cast<chorus::NetRequest**>(request));
}

ncclResult_t pluginIrecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  return net->irecv(static_cast<chorus::NetRecvComm*>(recvComm), n, data, sizes, tags,
                    reinterpret_cast<chorus::NetMemHandle**>(mhandles),
                    reinterpret_cast<chorus::NetRequest**>(request));
}

ncclResult_t pluginIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return net->iflush(static_cast<chorus::NetRecvComm*>(recvComm), n, data, sizes,
                     reinterpret_cast<chorus::NetMemHandle**>(mhandles),
                     reinterpret_cast<chorus::NetRequest**>(request));
}

ncclResult_t pluginTest(void* request, int* done, int* sizes) {
  return net->test(static_cast<chorus::NetRequest*>(request), done, sizes);
}

ncclResult_t pluginCloseSend(void* comm) { return net->closeSend(static_cast<chorus::NetSendComm*>(comm)); }
ncclResult_t pluginCloseRecv(void* comm) { return net->closeRecv(static_cast<chorus::NetRecvComm*>(comm)); }
ncclResult_t pluginCloseListen(void* comm) { return net->closeListen(static_cast<chorus::NetListenComm*>(comm)); }

#ifdef CHORUS_TEST_NET_PLUGIN_V10
ncclResult_t pluginIrecvWide(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** request) {
  constexpr int kMaxRecvs = 8;
  if (n < 1 || n > kMaxRecvs || sizes == nullptr) return ncclInvalidArgument;
  int narrow[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > INT_MAX) return ncclInvalidArgument;
    narrow[i] = static_cast<int>(sizes[i]);
  }
  return pluginIrecv(recvComm, n, data, narrow, tags, mhandles, request);
}

ncclResult_t pluginInitV10(ncclDebugLogger_t logFunction, ncclProfilerCallback_t) { return pluginInit(logFunction); }

ncclResult_t pluginConnectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                              ncclNetDeviceHandle_v10_t** sendDevComm) {
  if (config == nullptr) return ncclInvalidArgument;
  if (sendDevComm != nullptr && *sendDevComm != nullptr) return ncclInvalidArgument;  // no device offload
  chorus::NetCommConfig commConfig;  // the host's traffic class goes on to the socket net
  if (config->trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) commConfig.trafficClass = config->trafficClass;
  return net->connect(dev, commConfig, handle, reinterpret_cast<chorus::NetSendComm**>(sendComm));
}

ncclResult_t pluginIsendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  return pluginIsend(sendComm, data, size, tag, mhandle, request);
}

ncclResult_t pluginIrecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** phandles, void** request) {
  if (phandles == nullptr) return ncclInvalidArgument;  // NCCL always passes the array
  return pluginIrecvWide(recvComm, n, data, sizes, tags, mhandles, request);
}
#else
ncclResult_t pluginIsendV8(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return pluginIsend(sendComm, data, static_cast<size_t>(size), tag, mhandle, request);
}
#endif

}  // namespace

#ifdef CHORUS_TEST_NET_PLUGIN_V10
extern "C" __attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "chorustest-v10",
    .init = pluginInitV10,
    .devices = pluginDevices,
    .getProperties = pluginGetProperties<ncclNetProperties_v10_t>,
    .listen = pluginListen,
    .connect = pluginConnectV10,
    .accept = pluginAccept,
    .regMr = pluginRegMr,
    .regMrDmaBuf = nullptr,
    .deregMr = pluginDeregMr,
    .isend = pluginIsendV10,
    .irecv = pluginIrecvV10,
    .iflush = pluginIflush,
    .test = pluginTest,
    .closeSend = pluginCloseSend,
    .closeRecv = pluginCloseRecv,
    .closeListen = pluginCloseListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = nullptr,
};
#else
extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "chorustest-v8",
    .init = pluginInit,
    .devices = pluginDevices,
    .getProperties = pluginGetProperties<ncclNetProperties_v8_t>,
    .listen = pluginListen,
    .connect = pluginConnect,
    .accept = pluginAccept,
    .regMr = pluginRegMr,
    .regMrDmaBuf = nullptr,
    .deregMr = pluginDeregMr,
    .isend = pluginIsendV8,
    .irecv = pluginIrecv,
    .iflush = pluginIflush,
    .test = pluginTest,
    .closeSend = pluginCloseSend,
    .closeRecv = pluginCloseRecv,
    .closeListen = pluginCloseListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
};
#endif
