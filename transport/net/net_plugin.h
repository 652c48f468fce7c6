// External net plugins: NCCL_NET_PLUGIN names a libnccl-net-<name>.so exporting one of
// NCCL's ncclNet_v11/v10/v9/v8 tables; NetPluginAdapter drives that table as a chorus::Net,
// so plugins built for NCCL work unchanged.
//
// Lookup, as NCCL does it:
//   unset        try libnccl-net.so (not finding it is normal: INFO)
//   "none"       no plugin
//   <name>       try libnccl-net-<name>.so, then <name> itself as a file name or path
// The library is opened RTLD_NOW|RTLD_LOCAL; ncclNetPlugin_v11, then _v10, _v9, _v8 is
// looked up, and the first found is used.
//
// v11 is initialised per communicator in NCCL: init returns a context that carries the
// communicator's traffic class, and listen and connect take it. Chorus has one net per
// process, so the adapter keeps one context per traffic class a connect asks for (the one
// without a class made by init(), for listen too), and finalizes them all when destroyed.
// setNetAttr, a hint NCCL may give, is never called: the plugin keeps its defaults.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <variant>

#include "transport/net/net.h"
#include "transport/net/net_plugin_abi.h"

namespace chorus {

// Closes a dlopen handle.
struct DlHandleCloser {
  void operator()(void* handle) const;
};
using DlHandle = std::unique_ptr<void, DlHandleCloser>;

// The table a plugin exports, in one of the ABI versions Chorus drives.
using NetPluginTable =
    std::variant<const ncclNet_v8_t*, const ncclNet_v9_t*, const ncclNet_v10_t*, const ncclNet_v11_t*>;

class NetPluginAdapter final : public Net {
 public:
  // `table` is not null; `library` owns the code behind it.
  NetPluginAdapter(DlHandle library, std::string path, NetPluginTable table);
  // Closes the comms the caller left open, finalizes the v11 contexts, then closes the library.
  ~NetPluginAdapter() override;
  NetPluginAdapter(const NetPluginAdapter&) = delete;
  NetPluginAdapter& operator=(const NetPluginAdapter&) = delete;

  // The table's name; the version of the ABI in use (8, 9, 10 or 11); the library file.
  const char* name() const override { return name_.c_str(); }
  int version() const { return version_; }
  const std::string& path() const { return path_; }

  ncclResult_t init() override;
  ncclResult_t devices(int* count) override;
  ncclResult_t getProperties(int dev, NetProperties* props) override;
  ncclResult_t listen(int dev, void* handle, NetListenComm** listenComm) override;
  using Net::connect;
  ncclResult_t connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) override;
  ncclResult_t accept(NetListenComm* listenComm, NetRecvComm** recvComm) override;
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) override;
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           NetMemHandle** mhandle) override;
  ncclResult_t deregMr(void* comm, NetMemHandle* mhandle) override;
  ncclResult_t isend(NetSendComm* comm, void* data, int size, int tag, NetMemHandle* mhandle,
                     NetRequest** request) override;
  ncclResult_t irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* tags, NetMemHandle** mhandles,
                     NetRequest** request) override;
  ncclResult_t iflush(NetRecvComm* comm, int n, void** data, int* sizes, NetMemHandle** mhandles,
                      NetRequest** request) override;
  ncclResult_t test(NetRequest* request, int* done, int* sizes) override;
  ncclResult_t closeSend(NetSendComm* comm) override;
  ncclResult_t closeRecv(NetRecvComm* comm) override;
  ncclResult_t closeListen(NetListenComm* comm) override;

 private:
  // Calls f(table) on the table in use; f may tell versions apart with if constexpr.
  template <typename F>
  ncclResult_t call(F&& f) const {
    return std::visit([&](const auto* table) { return f(*table); }, table_);
  }
  // v11: the context for connections of `trafficClass` (kNetTrafficClassUndef: the plugin's
  // default), made by the plugin's init the first time it is asked for.
  ncclResult_t contextFor(int trafficClass, void** context);
  ncclResult_t checked(const char* call, ncclResult_t result) const;
  ncclResult_t checkReady(const char* call) const;
  ncclResult_t checkDevice(const char* call, int dev) const;
  ncclResult_t checkOpen(const char* call, const std::unordered_set<void*>& comms, void* comm);

  DlHandle library_;  // first member: closed last, after every call into the table
  std::string path_;
  std::string name_;
  NetPluginTable table_;
  int version_;
  bool initialized_ = false;
  int deviceCount_ = 0;
  // Comms handed out and not yet closed, closed by the destructor if the caller did not.
  std::mutex mutex_;
  std::unordered_set<void*> listenComms_;
  std::unordered_set<void*> sendComms_;
  std::unordered_set<void*> recvComms_;
  // v11 contexts by traffic class; finalized by the destructor after the comms are closed.
  std::mutex contextMutex_;
  std::map<int, void*> contexts_;
};

// Loads the plugin `setting` (NCCL_NET_PLUGIN's value; nullptr when unset) selects. No
// plugin is not an error: *out stays null and ncclSuccess is returned; a library that is
// found but unusable (no table, a table without the calls Chorus needs) is a WARN and
// ncclSuccess with no plugin too, so the caller falls back to its built-in nets.
// The plugin is not initialized: call init() on it.
ncclResult_t loadNetPlugin(const char* setting, std::unique_ptr<Net>* out);

}  // namespace chorus
