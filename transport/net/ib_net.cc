#include "transport/net/ib_net.h"

#include "transport/net/ib_verbs_api.h"

#if CHORUS_HAVE_IBVERBS

#include <endian.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "core/interfaces.h"
#include "transport/net/ib_comm.h"
#include "transport/net/ib_connect.h"
#include "transport/net/ib_net_wire.h"
#include "transport/net/net_arguments.h"

namespace chorus {

using namespace ib_net_wire;

namespace {

ncclResult_t invalid(const char* what) {
  WARN("NET/IB : %s", what);
  return ncclInvalidArgument;
}

class IbNet final : public Net {
 public:
  ~IbNet() override = default;  // closes every comm still open

  const char* name() const override { return "IB"; }
  ncclResult_t init() override;
  ncclResult_t devices(int* count) override;
  ncclResult_t getProperties(int dev, NetProperties* props) override;
  ncclResult_t listen(int dev, void* handle, NetListenComm** listenComm) override;
  using Net::connect;
  ncclResult_t connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) override;
  ncclResult_t accept(NetListenComm* listenComm, NetRecvComm** recvComm) override;
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) override;
  ncclResult_t deregMr(void* comm, NetMemHandle* mhandle) override;
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           NetMemHandle** mhandle) override;
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
  ncclResult_t checkDevice(const char* call, int dev) const;
  ncclResult_t closeComm(const void* comm, bool sending);
  IbComm* findComm(const void* comm);

  // Listen, connect, accept, regMr and close may come from different threads; data
  // calls on one comm come from one thread at a time and do not take this lock.
  std::mutex mutex_;
  bool initialized_ = false;
  IbSettings settings_;
  NetInterface interface_;  // where listeners accept the out-of-band connection
  std::vector<IbPort> ports_;
  std::unordered_map<const void*, std::unique_ptr<IbListener>> listeners_;
  std::unordered_map<const void*, std::unique_ptr<IbComm>> comms_;
  std::unordered_map<uint64_t, std::unique_ptr<IbHandshake>> pendingConnects_;
  std::unordered_map<const IbDevice*, int> gpuPtrSupport_;  // gpuPtrSupportOf's answers
  uint64_t nextConnectId_ = 1;
};

ncclResult_t IbNet::init() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (initialized_) return ncclSuccess;
  std::string why;
  const IbVerbsApi* api = ibVerbs(&why);
  if (api == nullptr) {
    INFO(kSubsysInit | kSubsysNet, "NET/IB : no usable HCA: %s; the socket net will be used", why.c_str());
    return ncclSystemError;
  }
  settings_ = readIbSettings();
  std::string hcaSetting = envString("NCCL_IB_HCA");
  int deviceCount = 0;
  if (discoverIbPorts(api, parseHcaFilter(hcaSetting), settings_.gidIndex, &ports_, &deviceCount, &why) !=
      ncclSuccess) {
    INFO(kSubsysInit | kSubsysNet, "NET/IB : no usable HCA: %s; the socket net will be used", why.c_str());
    return ncclSystemError;
  }
  if (ports_.empty()) {
    INFO(kSubsysInit | kSubsysNet,
         "NET/IB : no usable HCA port (%d device(s) found, NCCL_IB_HCA=%s); the socket net will be used", deviceCount,
         hcaSetting.empty() ? "<unset>" : hcaSetting.c_str());
    return ncclSystemError;
  }
  if (findBootstrapInterface(AF_UNSPEC, &interface_) != ncclSuccess) {
    ports_.clear();
    INFO(kSubsysInit | kSubsysNet,
         "NET/IB : no IP interface for the out-of-band connections; the socket net will be used");
    return ncclSystemError;
  }
  std::string names;
  for (size_t i = 0; i < ports_.size(); ++i) {
    names += " [" + std::to_string(i) + "]" + ports_[i].name + "/" + linkLayerName(ports_[i].linkLayer);
  }
  INFO(kSubsysInit | kSubsysNet, "NET/IB : using%s; out-of-band %s:%s", names.c_str(), interface_.name.c_str(),
       interface_.address.hostToString().c_str());
  initialized_ = true;
  return ncclSuccess;
}

ncclResult_t IbNet::checkDevice(const char* call, int dev) const {
  if (dev < 0 || dev >= static_cast<int>(ports_.size())) {
    WARN("NET/IB : %s: device %d does not exist (%zu devices%s)", call, dev, ports_.size(),
         initialized_ ? "" : "; init() has not succeeded");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

IbComm* IbNet::findComm(const void* comm) {
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second.get();
}

ncclResult_t IbNet::devices(int* count) {
  if (count == nullptr) return invalid("devices(): null count");
  std::lock_guard<std::mutex> lock(mutex_);
  *count = static_cast<int>(ports_.size());
  return ncclSuccess;
}

namespace {

// The GPU memory an HCA can register (NCCL's checks): device pointers through nvidia-peermem
// (the kernel module that lets ibv_reg_mr take them), or dma-bufs where libibverbs has
// ibv_reg_dmabuf_mr and the kernel driver takes them: a probe without a descriptor fails
// with EBADF there, with EOPNOTSUPP or EPROTONOSUPPORT where it does not.
int gpuPtrSupportOf(const IbDevice& device) {
  int flags = 0;
  for (const char* module : {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version",
                             "/sys/module/nv_peer_mem/version"}) {
    if (access(module, F_OK) == 0) flags |= kNetPtrCuda;
  }
  if (device.api().regDmabufMr != nullptr) {
    errno = 0;
    ibv_mr* probe = device.api().regDmabufMr(device.pd(), 0, 0, 0, -1, 0);
    if (probe != nullptr) {
      device.api().deregMr(probe);
    } else if (errno != EOPNOTSUPP && errno != EPROTONOSUPPORT) {
      flags |= kNetPtrCuda | kNetPtrDmaBuf;
    }
  }
  return flags;
}

}  // namespace

ncclResult_t IbNet::getProperties(int dev, NetProperties* props) {
  if (props == nullptr) return invalid("getProperties(): null properties");
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("getProperties()", dev));
  const IbPort& port = ports_[dev];
  *props = NetProperties{};
  props->name = port.name;
  props->pciPath = ibPciPath(port.device->name());
  props->guid = be64toh(port.device->attr().node_guid);
  auto known = gpuPtrSupport_.find(port.device.get());
  if (known == gpuPtrSupport_.end()) {
    known = gpuPtrSupport_.emplace(port.device.get(), gpuPtrSupportOf(*port.device)).first;
    INFO(kSubsysNet | kSubsysInit, "NET/IB : %s takes GPU memory: %s", port.device->name().c_str(),
         (known->second & kNetPtrDmaBuf) != 0 ? "yes, by dma-buf"
         : known->second != 0                 ? "yes, through nvidia-peermem"
                                              : "no (neither nvidia-peermem nor dma-buf)");
  }
  props->ptrSupport = kNetPtrHost | known->second;
  props->speed = port.speedMbps;
  props->port = port.port;
  props->maxComms = port.device->attr().max_qp;
  props->maxRecvs = 1;
  return ncclSuccess;
}

ncclResult_t IbNet::listen(int dev, void* handle, NetListenComm** listenComm) {
  if (listenComm != nullptr) *listenComm = nullptr;
  if (handle == nullptr || listenComm == nullptr) return invalid("listen(): null handle or listenComm");
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("listen()", dev));
  Socket socket;
  CHORUS_CHECK(Socket::listen(interface_.address, &socket));
  Handle wire{kHandleMagic, socket.address().length(), {}, 0, {0, 0}};
  memcpy(wire.address, socket.address().sa(), wire.addressLength);
  if (getrandom(wire.key, sizeof(wire.key), 0) != static_cast<ssize_t>(sizeof(wire.key))) {
    WARN("NET/IB : listen(): getrandom for the listener's key failed: %s", strerror(errno));
    return ncclSystemError;
  }
  memset(handle, 0, kNetHandleSize);
  memcpy(handle, &wire, sizeof(wire));
  INFO(kSubsysNet, "NET/IB : listening on %s for %s", socket.address().toString().c_str(), ports_[dev].name.c_str());
  auto listener = std::make_unique<IbListener>(std::move(socket), ports_[dev], settings_, keyOf(wire));
  *listenComm = reinterpret_cast<NetListenComm*>(listener.get());
  listeners_.emplace(listener.get(), std::move(listener));
  return ncclSuccess;
}

ncclResult_t IbNet::connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) {
  if (sendComm != nullptr) *sendComm = nullptr;
  if (handle == nullptr || sendComm == nullptr) return invalid("connect(): null handle or sendComm");
  Handle wire;
  memcpy(&wire, handle, sizeof(wire));
  SocketAddress address;
  if (wire.magic != kHandleMagic || wire.addressLength > sizeof(wire.address) ||
      !address.assign(reinterpret_cast<const sockaddr*>(wire.address), wire.addressLength)) {
    WARN("NET/IB : connect(): not an IB net handle (magic %llx, address length %u)",
         static_cast<unsigned long long>(wire.magic), wire.addressLength);
    return ncclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("connect()", dev));
  auto* connectId = static_cast<char*>(handle) + offsetof(Handle, connectId);
  if (wire.connectId == 0) {
    TcpStream stream;
    CHORUS_CHECK(TcpStream::startConnect(address, &stream));
    wire.connectId = nextConnectId_++;
    memcpy(connectId, &wire.connectId, sizeof(wire.connectId));
    // The communicator's traffic class (ncclConfig_t.trafficClass) overrides NCCL_IB_TC.
    IbSettings settings = settings_;
    if (config.trafficClass != kNetTrafficClassUndef) settings.trafficClass = config.trafficClass;
    pendingConnects_.emplace(wire.connectId, std::make_unique<IbHandshake>(/*sending=*/true, ports_[dev], settings,
                                                                           keyOf(wire), std::move(stream)));
  }
  auto it = pendingConnects_.find(wire.connectId);
  if (it == pendingConnects_.end()) {
    WARN("NET/IB : connect(): the handle names no pending connection (id %llu)",
         static_cast<unsigned long long>(wire.connectId));
    return ncclInvalidArgument;
  }
  bool done = false;
  ncclResult_t result = it->second->progress(&done);
  if (result != ncclSuccess || done) {
    memset(connectId, 0, sizeof(wire.connectId));  // the handle may start a new connection
    std::unique_ptr<IbComm> comm = result == ncclSuccess ? it->second->takeComm() : nullptr;
    pendingConnects_.erase(it);
    if (comm == nullptr) return result;
    INFO(kSubsysNet, "NET/IB : connected to %s from %s", comm->peerName().c_str(), comm->portName().c_str());
    *sendComm = reinterpret_cast<NetSendComm*>(comm.get());
    comms_.emplace(comm.get(), std::move(comm));
  }
  return ncclSuccess;
}

ncclResult_t IbNet::accept(NetListenComm* listenComm, NetRecvComm** recvComm) {
  if (recvComm != nullptr) *recvComm = nullptr;
  if (listenComm == nullptr || recvComm == nullptr) return invalid("accept(): null listenComm or recvComm");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listeners_.find(listenComm);
  if (it == listeners_.end()) return invalid("accept(): not a listen comm of this net");
  std::unique_ptr<IbComm> comm;
  CHORUS_CHECK(it->second->progress(&comm));
  if (comm == nullptr) return ncclSuccess;
  INFO(kSubsysNet, "NET/IB : accepted a connection from %s on %s", comm->peerName().c_str(), comm->portName().c_str());
  *recvComm = reinterpret_cast<NetRecvComm*>(comm.get());
  comms_.emplace(comm.get(), std::move(comm));
  return ncclSuccess;
}

ncclResult_t IbNet::regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) {
  // CUDA memory registers as host memory does, through nvidia-peermem.
  CHORUS_CHECK(checkRegMr("IB", comm, data, size, type, mhandle, kNetPtrHost | kNetPtrCuda));
  std::lock_guard<std::mutex> lock(mutex_);
  IbComm* ibComm = findComm(comm);
  if (ibComm == nullptr) return invalid("regMr(): not a send or receive comm of this net");
  return ibComm->registerMemory(data, size, mhandle);
}

ncclResult_t IbNet::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                NetMemHandle** mhandle) {
  CHORUS_CHECK(checkRegMr("IB", comm, data, size, type, mhandle, kNetPtrCuda));
  if (fd < 0) return invalid("regMrDmaBuf(): no dma-buf descriptor");
  std::lock_guard<std::mutex> lock(mutex_);
  IbComm* ibComm = findComm(comm);
  if (ibComm == nullptr) return invalid("regMrDmaBuf(): not a send or receive comm of this net");
  return ibComm->registerDmaBuf(data, size, offset, fd, mhandle);
}

ncclResult_t IbNet::deregMr(void* comm, NetMemHandle* mhandle) {
  if (comm == nullptr || mhandle == nullptr) return invalid("deregMr(): null comm or mhandle");
  std::lock_guard<std::mutex> lock(mutex_);
  IbComm* ibComm = findComm(comm);
  if (ibComm == nullptr) return invalid("deregMr(): not a send or receive comm of this net");
  return ibComm->deregisterMemory(mhandle);
}

ncclResult_t IbNet::isend(NetSendComm* comm, void* data, int size, int /*tag*/, NetMemHandle* mhandle,
                          NetRequest** request) {
  if (request != nullptr) *request = nullptr;
  if (comm == nullptr || request == nullptr) return invalid("isend(): null comm or request");
  CHORUS_CHECK(checkNetBuffer("IB", "isend", data, size));
  auto* ibComm = reinterpret_cast<IbComm*>(comm);
  if (!ibComm->isKind(/*sending=*/true)) return invalid("isend(): not a send comm of the IB net");
  return ibComm->post(data, static_cast<size_t>(size), mhandle, request);
}

ncclResult_t IbNet::irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* /*tags*/, NetMemHandle** mhandles,
                          NetRequest** request) {
  if (request != nullptr) *request = nullptr;
  if (comm == nullptr || request == nullptr || data == nullptr || sizes == nullptr) {
    return invalid("irecv(): null comm, data, sizes or request");
  }
  CHORUS_CHECK(checkSingleReceive("IB", n, data, sizes));
  auto* ibComm = reinterpret_cast<IbComm*>(comm);
  if (!ibComm->isKind(/*sending=*/false)) return invalid("irecv(): not a receive comm of the IB net");
  return ibComm->post(data[0], static_cast<size_t>(sizes[0]), mhandles != nullptr ? mhandles[0] : nullptr, request);
}

ncclResult_t IbNet::iflush(NetRecvComm* comm, int n, void** /*data*/, int* /*sizes*/, NetMemHandle** /*mhandles*/,
                           NetRequest** request) {
  if (request != nullptr) *request = nullptr;
  if (comm == nullptr || request == nullptr || n < 1) return invalid("iflush(): null comm or request, or n < 1");
  if (!reinterpret_cast<IbComm*>(comm)->isKind(/*sending=*/false)) {
    return invalid("iflush(): not a receive comm of the IB net");
  }
  return ncclSuccess;  // host memory: the receive's completion already made it visible
}

ncclResult_t IbNet::test(NetRequest* request, int* done, int* sizes) {
  if (done != nullptr) *done = 0;
  if (request == nullptr || done == nullptr) return invalid("test(): null request or done");
  auto* ibRequest = reinterpret_cast<IbRequest*>(request);
  if (ibRequest->magic != IbRequest::kMagic) return invalid("test(): not a request of the IB net");
  return ibRequest->comm->test(ibRequest, done, sizes);
}

ncclResult_t IbNet::closeComm(const void* comm, bool sending) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end() || !it->second->isKind(sending)) {
    WARN("NET/IB : %s(): not a %s comm of this net", sending ? "closeSend" : "closeRecv", sending ? "send" : "receive");
    return ncclInvalidArgument;
  }
  comms_.erase(it);
  return ncclSuccess;
}

ncclResult_t IbNet::closeSend(NetSendComm* comm) {
  if (comm == nullptr) return invalid("closeSend(): null comm");
  return closeComm(comm, /*sending=*/true);
}

ncclResult_t IbNet::closeRecv(NetRecvComm* comm) {
  if (comm == nullptr) return invalid("closeRecv(): null comm");
  return closeComm(comm, /*sending=*/false);
}

ncclResult_t IbNet::closeListen(NetListenComm* comm) {
  if (comm == nullptr) return invalid("closeListen(): null comm");
  std::lock_guard<std::mutex> lock(mutex_);
  if (listeners_.erase(comm) == 0) return invalid("closeListen(): not a listen comm of this net");
  return ncclSuccess;
}

}  // namespace

std::unique_ptr<Net> makeIbNet() { return std::make_unique<IbNet>(); }

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
