// Loading an external net plugin and driving its NCCL table as a chorus::Net.
#include "transport/net/net_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <climits>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/debug.h"
#include "core/plugin_log.h"

namespace chorus {
namespace {

// The profiler callback of v10 and v11: Chorus emits no network-defined profiler events
// (src/profiler/profiler.h says which it emits), so they are accepted and dropped.
ncclResult_t pluginProfilerCallback(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

// Most receives one irecv may group (NCCL's NCCL_NET_IB_MAX_RECVS).
constexpr int kMaxGroupedRecvs = 8;

template <typename Table>
constexpr int kTableVersion = std::is_same_v<Table, ncclNet_v11_t>   ? 11
                              : std::is_same_v<Table, ncclNet_v10_t> ? 10
                              : std::is_same_v<Table, ncclNet_v9_t>  ? 9
                                                                     : 8;

// The properties struct a table's getProperties fills.
template <typename GetProperties>
struct PropertiesArgument;
template <typename Properties>
struct PropertiesArgument<ncclResult_t (*)(int, Properties*)> {
  using type = Properties;
};
template <typename Table>
using PropertiesOf = typename PropertiesArgument<decltype(Table::getProperties)>::type;

template <typename Table>
constexpr bool isV11 = std::is_same_v<Table, ncclNet_v11_t>;

int tableVersion(const NetPluginTable& table) {
  return std::visit([](const auto* t) { return kTableVersion<std::decay_t<decltype(*t)>>; }, table);
}

// The calls Chorus makes; a table lacking one is refused. iflush may be null (nothing to flush),
// and so may v11's setNetAttr (never called).
template <typename Table>
const char* missingCall(const Table& t) {
  if (t.name == nullptr) return "name";
  if (t.init == nullptr) return "init";
  if (t.devices == nullptr) return "devices";
  if (t.getProperties == nullptr) return "getProperties";
  if (t.listen == nullptr) return "listen";
  if (t.connect == nullptr) return "connect";
  if (t.accept == nullptr) return "accept";
  if (t.regMr == nullptr) return "regMr";
  if (t.deregMr == nullptr) return "deregMr";
  if (t.isend == nullptr) return "isend";
  if (t.irecv == nullptr) return "irecv";
  if (t.test == nullptr) return "test";
  if (t.closeSend == nullptr) return "closeSend";
  if (t.closeRecv == nullptr) return "closeRecv";
  if (t.closeListen == nullptr) return "closeListen";
  if constexpr (isV11<Table>) {
    if (t.finalize == nullptr) return "finalize";
  }
  return nullptr;
}

// The newest table `library` exports, if any.
std::optional<NetPluginTable> findTable(void* library) {
  if (void* t = dlsym(library, NCCL_NET_PLUGIN_SYMBOL_V11)) return NetPluginTable(static_cast<const ncclNet_v11_t*>(t));
  if (void* t = dlsym(library, NCCL_NET_PLUGIN_SYMBOL_V10)) return NetPluginTable(static_cast<const ncclNet_v10_t*>(t));
  if (void* t = dlsym(library, NCCL_NET_PLUGIN_SYMBOL_V9)) return NetPluginTable(static_cast<const ncclNet_v9_t*>(t));
  if (void* t = dlsym(library, NCCL_NET_PLUGIN_SYMBOL_V8)) return NetPluginTable(static_cast<const ncclNet_v8_t*>(t));
  return std::nullopt;
}

}  // namespace

void DlHandleCloser::operator()(void* handle) const {
  if (handle != nullptr && dlclose(handle) != 0) {
    const char* error = dlerror();
    WARN("NET/Plugin: dlclose failed: %s", error != nullptr ? error : "unknown error");
  }
}

NetPluginAdapter::NetPluginAdapter(DlHandle library, std::string path, NetPluginTable table)
    : library_(std::move(library)), path_(std::move(path)), table_(table), version_(tableVersion(table)) {
  const char* tableName = std::visit([](const auto* t) { return t->name; }, table_);
  name_ = tableName != nullptr ? tableName : "";
}

NetPluginAdapter::~NetPluginAdapter() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sendComms_.empty() || !recvComms_.empty() || !listenComms_.empty()) {
    INFO(kSubsysNet, "NET/Plugin %s: closing %zu send, %zu recv and %zu listen comms left open", name_.c_str(),
         sendComms_.size(), recvComms_.size(), listenComms_.size());
  }
  for (void* comm : sendComms_) checked("closeSend", call([&](const auto& t) { return t.closeSend(comm); }));
  for (void* comm : recvComms_) checked("closeRecv", call([&](const auto& t) { return t.closeRecv(comm); }));
  for (void* comm : listenComms_) checked("closeListen", call([&](const auto& t) { return t.closeListen(comm); }));
  // A context outlives the comms made with it.
  std::lock_guard<std::mutex> contextLock(contextMutex_);
  if (const auto* v11 = std::get_if<const ncclNet_v11_t*>(&table_)) {
    for (const auto& [trafficClass, context] : contexts_) checked("finalize", (*v11)->finalize(context));
  }
  // library_ is the first member, so it is closed after this body, once no comm is left.
}

ncclResult_t NetPluginAdapter::checked(const char* what, ncclResult_t result) const {
  if (result == ncclRemoteError) {
    // The peer's side: it closed or failed (also how a peer that is done looks). The plugin
    // logs the details; whoever waits on the connection WARNs, naming the peer rank.
    INFO(kSubsysNet, "NET/Plugin %s (%s): %s failed: %s (%d)", name_.c_str(), path_.c_str(), what,
         ncclGetErrorString(result), static_cast<int>(result));
  } else if (result != ncclSuccess) {
    WARN("NET/Plugin %s (%s): %s failed: %s (%d)", name_.c_str(), path_.c_str(), what, ncclGetErrorString(result),
         static_cast<int>(result));
  }
  return result;
}

ncclResult_t NetPluginAdapter::checkReady(const char* what) const {
  if (!initialized_) {
    WARN("NET/Plugin %s: %s called before init", name_.c_str(), what);
    return ncclInternalError;
  }
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::checkDevice(const char* what, int dev) const {
  CHORUS_CHECK(checkReady(what));
  if (dev < 0 || dev >= deviceCount_) {
    WARN("NET/Plugin %s: %s: dev %d out of range [0, %d)", name_.c_str(), what, dev, deviceCount_);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::checkOpen(const char* what, const std::unordered_set<void*>& comms, void* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (comm == nullptr || comms.count(comm) == 0) {
    WARN("NET/Plugin %s: %s: comm %p is not an open comm of this plugin", name_.c_str(), what, comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::contextFor(int trafficClass, void** context) {
  *context = nullptr;
  const auto* table = std::get_if<const ncclNet_v11_t*>(&table_);
  if (table == nullptr) return ncclSuccess;  // older ABIs have no contexts
  std::lock_guard<std::mutex> lock(contextMutex_);
  auto found = contexts_.find(trafficClass);
  if (found != contexts_.end()) {
    *context = found->second;
    return ncclSuccess;
  }
  ncclNetCommConfig_v11_t config{trafficClass == kNetTrafficClassUndef ? NCCL_NET_TRAFFIC_CLASS_UNDEF : trafficClass};
  // NCCL passes the communicator's hash; a context here serves every communicator of its
  // traffic class, so it gets its own number instead (the first one 0).
  const uint64_t contextId = contexts_.size();
  void* made = nullptr;
  CHORUS_CHECK(
      checked("init", (*table)->init(&made, contextId, &config, &pluginLogger<kSubsysNet>, &pluginProfilerCallback)));
  contexts_.emplace(trafficClass, made);
  INFO(kSubsysNet, "NET/Plugin %s: context %llu for traffic class %d", name_.c_str(),
       static_cast<unsigned long long>(contextId), trafficClass);
  *context = made;
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::init() {
  if (initialized_) return ncclSuccess;
  void* defaultContext = nullptr;
  CHORUS_CHECK(contextFor(kNetTrafficClassUndef, &defaultContext));  // v11's init
  CHORUS_CHECK(checked("init", call([](const auto& t) {
                         using Table = std::decay_t<decltype(t)>;
                         if constexpr (isV11<Table>) {
                           return ncclSuccess;  // initialised by contextFor
                         } else if constexpr (std::is_same_v<Table, ncclNet_v10_t>) {
                           return t.init(&pluginLogger<kSubsysNet>, &pluginProfilerCallback);
                         } else {
                           return t.init(&pluginLogger<kSubsysNet>);
                         }
                       })));
  int count = 0;
  CHORUS_CHECK(checked("devices", call([&](const auto& t) { return t.devices(&count); })));
  if (count < 0) {
    WARN("NET/Plugin %s: devices gave a negative count %d", name_.c_str(), count);
    return ncclInternalError;
  }
  deviceCount_ = count;
  initialized_ = true;
  INFO(kSubsysInit | kSubsysNet, "NET/Plugin %s: ncclNet_v%d initialized, %d devices", name_.c_str(), version_, count);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::devices(int* count) {
  CHORUS_CHECK(checkReady("devices"));
  if (count == nullptr) {
    WARN("NET/Plugin %s: devices: count is null", name_.c_str());
    return ncclInvalidArgument;
  }
  *count = deviceCount_;
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::getProperties(int dev, NetProperties* props) {
  CHORUS_CHECK(checkDevice("getProperties", dev));
  if (props == nullptr) {
    WARN("NET/Plugin %s: getProperties: props is null", name_.c_str());
    return ncclInvalidArgument;
  }
  return checked("getProperties", call([&](const auto& t) {
                   // v11's maxMultiRequestSize, like the device-offload and vNIC fields, has no use here.
                   PropertiesOf<std::decay_t<decltype(t)>> p{};
                   ncclResult_t result = t.getProperties(dev, &p);
                   if (result != ncclSuccess) return result;
                   props->name = p.name != nullptr ? p.name : "";
                   props->pciPath = p.pciPath != nullptr ? p.pciPath : "";
                   props->guid = p.guid;
                   props->ptrSupport = p.ptrSupport;
                   props->speed = p.speed;
                   props->port = p.port;
                   props->latency = p.latency;
                   props->maxComms = p.maxComms;
                   props->maxRecvs = p.maxRecvs;
                   return ncclSuccess;
                 }));
}

ncclResult_t NetPluginAdapter::listen(int dev, void* handle, NetListenComm** listenComm) {
  CHORUS_CHECK(checkDevice("listen", dev));
  if (handle == nullptr || listenComm == nullptr) {
    WARN("NET/Plugin %s: listen: handle %p, listenComm %p (null)", name_.c_str(), handle,
         static_cast<void*>(listenComm));
    return ncclInvalidArgument;
  }
  void* context = nullptr;
  CHORUS_CHECK(contextFor(kNetTrafficClassUndef, &context));  // listening has no traffic class
  void* comm = nullptr;
  CHORUS_CHECK(checked("listen", call([&](const auto& t) {
                         if constexpr (isV11<std::decay_t<decltype(t)>>) {
                           return t.listen(context, dev, handle, &comm);
                         } else {
                           return t.listen(dev, handle, &comm);
                         }
                       })));
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    listenComms_.insert(comm);
  }
  *listenComm = static_cast<NetListenComm*>(comm);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::connect(int dev, const NetCommConfig& commConfig, void* handle, NetSendComm** sendComm) {
  CHORUS_CHECK(checkDevice("connect", dev));
  if (handle == nullptr || sendComm == nullptr) {
    WARN("NET/Plugin %s: connect: handle %p, sendComm %p (null)", name_.c_str(), handle, static_cast<void*>(sendComm));
    return ncclInvalidArgument;
  }
  void* context = nullptr;  // v11 takes the traffic class in the context's init, v10 in connect
  CHORUS_CHECK(contextFor(commConfig.trafficClass, &context));
  void* comm = nullptr;
  ncclNetDeviceHandle_v8_t* deviceHandle = nullptr;  // no device offload
  CHORUS_CHECK(checked("connect", call([&](const auto& t) {
                         using Table = std::decay_t<decltype(t)>;
                         if constexpr (isV11<Table>) {
                           return t.connect(context, dev, handle, &comm, &deviceHandle);
                         } else if constexpr (std::is_same_v<Table, ncclNet_v10_t>) {
                           // The v10 ABI carries the traffic class; older ones have no way to.
                           ncclNetCommConfig_v10_t config{commConfig.trafficClass == kNetTrafficClassUndef
                                                              ? NCCL_NET_TRAFFIC_CLASS_UNDEF
                                                              : commConfig.trafficClass};
                           return t.connect(dev, &config, handle, &comm, &deviceHandle);
                         } else {
                           return t.connect(dev, handle, &comm, &deviceHandle);
                         }
                       })));
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    sendComms_.insert(comm);
  }
  *sendComm = static_cast<NetSendComm*>(comm);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::accept(NetListenComm* listenComm, NetRecvComm** recvComm) {
  CHORUS_CHECK(checkReady("accept"));
  CHORUS_CHECK(checkOpen("accept", listenComms_, listenComm));
  if (recvComm == nullptr) {
    WARN("NET/Plugin %s: accept: recvComm is null", name_.c_str());
    return ncclInvalidArgument;
  }
  void* comm = nullptr;
  ncclNetDeviceHandle_v8_t* deviceHandle = nullptr;
  CHORUS_CHECK(checked("accept", call([&](const auto& t) { return t.accept(listenComm, &comm, &deviceHandle); })));
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    recvComms_.insert(comm);
  }
  *recvComm = static_cast<NetRecvComm*>(comm);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) {
  CHORUS_CHECK(checkReady("regMr"));
  if (comm == nullptr || mhandle == nullptr || (data == nullptr && size > 0)) {
    WARN("NET/Plugin %s: regMr: comm %p, data %p, size %zu, mhandle %p", name_.c_str(), comm, data, size,
         static_cast<void*>(mhandle));
    return ncclInvalidArgument;
  }
  void* handle = nullptr;
  CHORUS_CHECK(checked("regMr", call([&](const auto& t) { return t.regMr(comm, data, size, type, &handle); })));
  *mhandle = static_cast<NetMemHandle*>(handle);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                           NetMemHandle** mhandle) {
  CHORUS_CHECK(checkReady("regMrDmaBuf"));
  if (comm == nullptr || mhandle == nullptr || (data == nullptr && size > 0) || fd < 0) {
    WARN("NET/Plugin %s: regMrDmaBuf: comm %p, data %p, size %zu, fd %d, mhandle %p", name_.c_str(), comm, data, size,
         fd, static_cast<void*>(mhandle));
    return ncclInvalidArgument;
  }
  bool present = true;
  void* handle = nullptr;
  CHORUS_CHECK(checked("regMrDmaBuf", call([&](const auto& t) {
                         if (t.regMrDmaBuf == nullptr) {
                           present = false;
                           return ncclSuccess;
                         }
                         return t.regMrDmaBuf(comm, data, size, type, offset, fd, &handle);
                       })));
  if (!present) {
    WARN("NET/Plugin %s: regMrDmaBuf: the plugin has none, yet its ptrSupport says NCCL_PTR_DMABUF", name_.c_str());
    return ncclInvalidUsage;
  }
  *mhandle = static_cast<NetMemHandle*>(handle);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::deregMr(void* comm, NetMemHandle* mhandle) {
  CHORUS_CHECK(checkReady("deregMr"));
  if (comm == nullptr) {
    WARN("NET/Plugin %s: deregMr: comm is null", name_.c_str());
    return ncclInvalidArgument;
  }
  return checked("deregMr", call([&](const auto& t) { return t.deregMr(comm, mhandle); }));
}

ncclResult_t NetPluginAdapter::isend(NetSendComm* comm, void* data, int size, int tag, NetMemHandle* mhandle,
                                     NetRequest** request) {
  if (comm == nullptr || request == nullptr || size < 0 || (data == nullptr && size > 0)) {
    WARN("NET/Plugin %s: isend: comm %p, data %p, size %d, request %p", name_.c_str(), static_cast<void*>(comm), data,
         size, static_cast<void*>(request));
    return ncclInvalidArgument;
  }
  void* req = nullptr;
  CHORUS_CHECK(checked("isend", call([&](const auto& t) {
                         using Table = std::decay_t<decltype(t)>;
                         if constexpr (kTableVersion<Table> >= 10) {  // no profiler handle
                           return t.isend(comm, data, static_cast<size_t>(size), tag, mhandle, nullptr, &req);
                         } else if constexpr (std::is_same_v<Table, ncclNet_v9_t>) {
                           return t.isend(comm, data, static_cast<size_t>(size), tag, mhandle, &req);
                         } else {
                           return t.isend(comm, data, size, tag, mhandle, &req);
                         }
                       })));
  *request = static_cast<NetRequest*>(req);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* tags,
                                     NetMemHandle** mhandles, NetRequest** request) {
  if (comm == nullptr || request == nullptr || data == nullptr || sizes == nullptr || tags == nullptr || n < 1 ||
      n > kMaxGroupedRecvs) {
    WARN("NET/Plugin %s: irecv: comm %p, n %d (1..%d), data %p, sizes %p, tags %p, request %p", name_.c_str(),
         static_cast<void*>(comm), n, kMaxGroupedRecvs, static_cast<void*>(data), static_cast<void*>(sizes),
         static_cast<void*>(tags), static_cast<void*>(request));
    return ncclInvalidArgument;
  }
  size_t wideSizes[kMaxGroupedRecvs];
  void* profilerHandles[kMaxGroupedRecvs] = {};
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) {
      WARN("NET/Plugin %s: irecv: sizes[%d] = %d is negative", name_.c_str(), i, sizes[i]);
      return ncclInvalidArgument;
    }
    wideSizes[i] = static_cast<size_t>(sizes[i]);
  }
  void** handles = reinterpret_cast<void**>(mhandles);
  void* req = nullptr;
  CHORUS_CHECK(checked("irecv", call([&](const auto& t) {
                         using Table = std::decay_t<decltype(t)>;
                         if constexpr (kTableVersion<Table> >= 10) {
                           return t.irecv(comm, n, data, wideSizes, tags, handles, profilerHandles, &req);
                         } else if constexpr (std::is_same_v<Table, ncclNet_v9_t>) {
                           return t.irecv(comm, n, data, wideSizes, tags, handles, &req);
                         } else {
                           return t.irecv(comm, n, data, sizes, tags, handles, &req);
                         }
                       })));
  *request = static_cast<NetRequest*>(req);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::iflush(NetRecvComm* comm, int n, void** data, int* sizes, NetMemHandle** mhandles,
                                      NetRequest** request) {
  if (comm == nullptr || request == nullptr || n < 1 || n > kMaxGroupedRecvs) {
    WARN("NET/Plugin %s: iflush: comm %p, n %d (1..%d), request %p", name_.c_str(), static_cast<void*>(comm), n,
         kMaxGroupedRecvs, static_cast<void*>(request));
    return ncclInvalidArgument;
  }
  *request = nullptr;
  void* req = nullptr;
  void** handles = reinterpret_cast<void**>(mhandles);
  CHORUS_CHECK(checked("iflush", call([&](const auto& t) {
                         return t.iflush != nullptr ? t.iflush(comm, n, data, sizes, handles, &req) : ncclSuccess;
                       })));
  *request = static_cast<NetRequest*>(req);
  return ncclSuccess;
}

ncclResult_t NetPluginAdapter::test(NetRequest* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) {
    WARN("NET/Plugin %s: test: request %p, done %p (null)", name_.c_str(), static_cast<void*>(request),
         static_cast<void*>(done));
    return ncclInvalidArgument;
  }
  return checked("test", call([&](const auto& t) { return t.test(request, done, sizes); }));
}

ncclResult_t NetPluginAdapter::closeSend(NetSendComm* comm) {
  CHORUS_CHECK(checkOpen("closeSend", sendComms_, comm));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sendComms_.erase(comm);
  }
  return checked("closeSend", call([&](const auto& t) { return t.closeSend(comm); }));
}

ncclResult_t NetPluginAdapter::closeRecv(NetRecvComm* comm) {
  CHORUS_CHECK(checkOpen("closeRecv", recvComms_, comm));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recvComms_.erase(comm);
  }
  return checked("closeRecv", call([&](const auto& t) { return t.closeRecv(comm); }));
}

ncclResult_t NetPluginAdapter::closeListen(NetListenComm* comm) {
  CHORUS_CHECK(checkOpen("closeListen", listenComms_, comm));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    listenComms_.erase(comm);
  }
  return checked("closeListen", call([&](const auto& t) { return t.closeListen(comm); }));
}

ncclResult_t loadNetPlugin(const char* setting, std::unique_ptr<Net>* out) {
  if (out == nullptr) {
    WARN("NET/Plugin: loadNetPlugin: out is null");
    return ncclInvalidArgument;
  }
  out->reset();
  bool isExplicit = setting != nullptr && setting[0] != '\0';
  if (isExplicit && strcasecmp(setting, "none") == 0) {
    INFO(kSubsysInit | kSubsysNet, "NET/Plugin: NCCL_NET_PLUGIN=none, no plugin loaded");
    return ncclSuccess;
  }
  std::vector<std::string> candidates;
  if (isExplicit) {
    candidates = {std::string("libnccl-net-") + setting + ".so", setting};
  } else {
    candidates = {"libnccl-net.so"};
  }
  DlHandle library;
  std::string path;
  std::string failures;
  for (const std::string& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      library.reset(handle);
      path = candidate;
      break;
    }
    const char* error = dlerror();
    // dlerror() names the file it could not open.
    failures += (failures.empty() ? "" : "; ") + std::string(error != nullptr ? error : candidate + ": unknown error");
  }
  if (!library) {
    if (isExplicit) {
      WARN("NET/Plugin: NCCL_NET_PLUGIN=%s: could not load the plugin (%s); using the built-in nets", setting,
           failures.c_str());
    } else {
      INFO(kSubsysInit | kSubsysNet, "NET/Plugin: no plugin found (%s), using the built-in nets", failures.c_str());
    }
    return ncclSuccess;
  }
  std::optional<NetPluginTable> table = findTable(library.get());
  if (!table) {
    WARN("NET/Plugin: %s exports none of %s, %s, %s, %s; not used", path.c_str(), NCCL_NET_PLUGIN_SYMBOL_V11,
         NCCL_NET_PLUGIN_SYMBOL_V10, NCCL_NET_PLUGIN_SYMBOL_V9, NCCL_NET_PLUGIN_SYMBOL_V8);
    return ncclSuccess;
  }
  const char* missing = std::visit([](const auto* t) { return missingCall(*t); }, *table);
  const int version = tableVersion(*table);
  if (missing != nullptr) {
    WARN("NET/Plugin: %s: ncclNetPlugin_v%d has no %s; not used", path.c_str(), version, missing);
    return ncclSuccess;
  }
  auto adapter = std::make_unique<NetPluginAdapter>(std::move(library), path, *table);
  INFO(kSubsysInit | kSubsysNet, "NET/Plugin: loaded %s: net plugin '%s', ncclNet_v%d", path.c_str(), adapter->name(),
       version);
  *out = std::move(adapter);
  return ncclSuccess;
}

}  // namespace chorus
