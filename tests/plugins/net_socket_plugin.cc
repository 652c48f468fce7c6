// A test net plugin: NCCL's plugin ABI over Chorus' SocketNet, exported as ncclNetPlugin_v8,
// or as ncclNetPlugin_v10 and/or _v11 when built with CHORUS_TEST_NET_PLUGIN_V10 and/or _V11
// (the v11 library has both, as real plugins do, so the loader must prefer the newest). It
// lets the loader and NetPluginAdapter be tested through a real dlopen'ed library.
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <map>
#include <memory>
#include <mutex>
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
  // Posing as a NIC with GPUDirect RDMA, for the GPU host-path tests (the GPU memory there
  // is host memory): CHORUS_TEST_NET_DEVICE_NAME names the devices as the topology's NICs,
  // CHORUS_TEST_NET_PTR_SUPPORT gives the NCCL_PTR_* flags.
  if (const char* name = getenv("CHORUS_TEST_NET_DEVICE_NAME")) stored->name = name;
  if (const char* ptr = getenv("CHORUS_TEST_NET_PTR_SUPPORT")) stored->ptrSupport = atoi(ptr);
  props->name = stored->name.data();
  props->pciPath = stored->pciPath.empty() ? nullptr : stored->pciPath.data();
  props->guid = stored->guid;
  props->ptrSupport = stored->ptrSupport;
  props->speed = stored->speed;
  props->port = stored->port;
  props->latency = stored->latency;
  props->maxComms = stored->maxComms;
  props->maxRecvs = stored->maxRecvs;
  if constexpr (requires { props->maxMultiRequestSize; }) props->maxMultiRequestSize = 1;  // v11: no multi-requests
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

}  // namespace

// What the GPU host-path tests ask of the plugin: registrations of "GPU" memory, plain and
// by dma-buf (the test finds these with dlsym).
extern "C" {
__attribute__((visibility("default"))) int chorusTestNetCudaRegistrations = 0;
__attribute__((visibility("default"))) int chorusTestNetDmaBufRegistrations = 0;
}

namespace {

bool posesWithCuda() {
  const char* ptr = getenv("CHORUS_TEST_NET_PTR_SUPPORT");
  return ptr != nullptr && (atoi(ptr) & chorus::kNetPtrCuda) != 0;
}

ncclResult_t pluginRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (type == chorus::kNetPtrCuda && posesWithCuda()) {
    __atomic_add_fetch(&chorusTestNetCudaRegistrations, 1, __ATOMIC_RELAXED);
    type = chorus::kNetPtrHost;  // the stand-in's GPU memory is host memory
  }
  return net->regMr(comm, data, size, type, reinterpret_cast<chorus::NetMemHandle**>(mhandle));
}

// A dma-buf registration: the descriptor must be open, and the memory is then registered
// as the host memory it is.
ncclResult_t pluginRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int fd, void** mhandle) {
  if (type != chorus::kNetPtrCuda || !posesWithCuda() || fcntl(fd, F_GETFD) < 0) return ncclInvalidArgument;
  __atomic_add_fetch(&chorusTestNetDmaBufRegistrations, 1, __ATOMIC_RELAXED);
  return net->regMr(comm, data, size, chorus::kNetPtrHost, reinterpret_cast<chorus::NetMemHandle**>(mhandle));
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

#if defined(CHORUS_TEST_NET_PLUGIN_V10) || defined(CHORUS_TEST_NET_PLUGIN_V11)
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

// The host's traffic class (NCCL_NET_TRAFFIC_CLASS_UNDEF: none) goes on to the socket net.
ncclResult_t pluginConnectWithClass(int dev, int trafficClass, void* handle, void** sendComm,
                                    ncclNetDeviceHandle_v10_t** sendDevComm) {
  if (sendDevComm != nullptr && *sendDevComm != nullptr) return ncclInvalidArgument;  // no device offload
  chorus::NetCommConfig commConfig;
  if (trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) commConfig.trafficClass = trafficClass;
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
#endif

#ifdef CHORUS_TEST_NET_PLUGIN_V10
ncclResult_t pluginInitV10(ncclDebugLogger_t logFunction, ncclProfilerCallback_t) { return pluginInit(logFunction); }

ncclResult_t pluginConnectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                              ncclNetDeviceHandle_v10_t** sendDevComm) {
  if (config == nullptr) return ncclInvalidArgument;
  return pluginConnectWithClass(dev, config->trafficClass, handle, sendComm, sendDevComm);
}
#endif

#ifdef CHORUS_TEST_NET_PLUGIN_V11
// What init makes for a communicator. Each holds a file descriptor so that a context the host
// never finalizes shows as a leaked descriptor; calls with a context init did not make fail.
struct PluginContext {
  PluginContext(int trafficClass, int fd) : trafficClass(trafficClass), fd(fd) {}
  ~PluginContext() { close(fd); }
  PluginContext(const PluginContext&) = delete;
  PluginContext& operator=(const PluginContext&) = delete;
  const int trafficClass;
  const int fd;
};
std::mutex contextMutex;
// Never destroyed, like `net`: only finalize releases a context, even when the library is unloaded.
auto& liveContexts = *new std::map<void*, std::unique_ptr<PluginContext>>();

// The context `ctx` names, or null when init did not make it (or finalize has released it).
PluginContext* liveContext(void* ctx) {
  std::lock_guard<std::mutex> lock(contextMutex);
  auto found = liveContexts.find(ctx);
  return found != liveContexts.end() ? found->second.get() : nullptr;
}

ncclResult_t pluginInitV11(void** ctx, uint64_t, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logFunction,
                           ncclProfilerCallback_t) {
  if (ctx == nullptr || config == nullptr) return ncclInvalidArgument;
  ncclResult_t result = pluginInit(logFunction);
  if (result != ncclSuccess) return result;
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ncclSystemError;
  auto context = std::make_unique<PluginContext>(config->trafficClass, fd);
  std::lock_guard<std::mutex> lock(contextMutex);
  *ctx = context.get();
  liveContexts.emplace(context.get(), std::move(context));
  return ncclSuccess;
}

ncclResult_t pluginFinalizeV11(void* ctx) {
  std::lock_guard<std::mutex> lock(contextMutex);
  return liveContexts.erase(ctx) == 1 ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t pluginListenV11(void* ctx, int dev, void* handle, void** listenComm) {
  if (liveContext(ctx) == nullptr) return ncclInvalidArgument;
  return pluginListen(dev, handle, listenComm);
}

// The traffic class comes from the context's init, as v11 has it.
ncclResult_t pluginConnectV11(void* ctx, int dev, void* handle, void** sendComm,
                              ncclNetDeviceHandle_v11_t** sendDevComm) {
  const PluginContext* context = liveContext(ctx);
  if (context == nullptr) return ncclInvalidArgument;
  return pluginConnectWithClass(dev, context->trafficClass, handle, sendComm, sendDevComm);
}

ncclResult_t pluginSetNetAttrV11(void* ctx, ncclNetAttr_v11_t* netAttr) {
  return liveContext(ctx) != nullptr && netAttr != nullptr ? ncclSuccess : ncclInvalidArgument;  // hints only
}
#endif

#if !defined(CHORUS_TEST_NET_PLUGIN_V10) && !defined(CHORUS_TEST_NET_PLUGIN_V11)
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
    .regMrDmaBuf = pluginRegMrDmaBuf,
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
#endif

#ifdef CHORUS_TEST_NET_PLUGIN_V11
extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "chorustest-v11",
    .init = pluginInitV11,
    .devices = pluginDevices,
    .getProperties = pluginGetProperties<ncclNetProperties_v11_t>,
    .listen = pluginListenV11,
    .connect = pluginConnectV11,
    .accept = pluginAccept,
    .regMr = pluginRegMr,
    .regMrDmaBuf = pluginRegMrDmaBuf,
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
    .finalize = pluginFinalizeV11,
    .setNetAttr = pluginSetNetAttrV11,
};
#endif

#if !defined(CHORUS_TEST_NET_PLUGIN_V10) && !defined(CHORUS_TEST_NET_PLUGIN_V11)
extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "chorustest-v8",
    .init = pluginInit,
    .devices = pluginDevices,
    .getProperties = pluginGetProperties<ncclNetProperties_v8_t>,
    .listen = pluginListen,
    .connect = pluginConnect,
    .accept = pluginAccept,
    .regMr = pluginRegMr,
    .regMrDmaBuf = pluginRegMrDmaBuf,
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
