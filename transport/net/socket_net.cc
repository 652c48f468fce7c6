#include "transport/net/socket_net.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "core/debug.h"
#include "core/env.h"
#include "transport/net/net_arguments.h"
#include "transport/net/pending_connect.h"
#include "transport/net/socket_comm.h"
#include "transport/net/socket_listener.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

using namespace socket_net_wire;

namespace {

constexpr size_t kMaxDevices = 16;
constexpr int kMaxThreads = 16;
// Sockets need no registration: regMr hands out this token.
char hostRegistration;

NetMemHandle* hostRegistrationHandle() { return reinterpret_cast<NetMemHandle*>(&hostRegistration); }

ncclResult_t invalid(const char* what) {
  WARN("NET/Socket: %s", what);
  return ncclInvalidArgument;
}

int linkSpeedMbps(const std::string& ifname) {
  std::ifstream in("/sys/class/net/" + ifname + "/speed");
  int speed = 0;
  if (in >> speed && speed > 0) return speed;
  return 10000;  // NCCL's guess when the link does not say (virtual interfaces, loopback)
}

std::string pciPath(const std::string& ifname) {
  char resolved[PATH_MAX];
  std::string link = "/sys/class/net/" + ifname + "/device";
  return realpath(link.c_str(), resolved) != nullptr ? resolved : "";
}

struct SocketSettings {
  int threads;      // NCCL_SOCKET_NTHREADS: helper threads per comm (1: none)
  int dataSockets;  // NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
};

// NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD, each clamped with a WARN.
SocketSettings socketSettings() {
  int64_t threads = envInt("NCCL_SOCKET_NTHREADS", 1);
  int64_t socks = envInt("NCCL_NSOCKS_PERTHREAD", 1);
  if (threads < 1 || threads > kMaxThreads) {
    int64_t clamped = std::clamp<int64_t>(threads, 1, kMaxThreads);
    WARN("NET/Socket: NCCL_SOCKET_NTHREADS=%lld is outside [1, %d]; using %lld", static_cast<long long>(threads),
         kMaxThreads, static_cast<long long>(clamped));
    threads = clamped;
  }
  if (socks < 1 || socks > kMaxDataSockets || socks * threads > kMaxDataSockets) {
    int64_t clamped = std::clamp<int64_t>(socks, 1, kMaxDataSockets / threads);
    WARN(
        "NET/Socket: NCCL_NSOCKS_PERTHREAD=%lld with NCCL_SOCKET_NTHREADS=%lld is outside [1, %u] sockets; using %lld "
        "per thread",
        static_cast<long long>(socks), static_cast<long long>(threads), kMaxDataSockets,
        static_cast<long long>(clamped));
    socks = clamped;
  }
  return {static_cast<int>(threads), static_cast<int>(socks * threads)};
}

}  // namespace

SocketNet::SocketNet() = default;
SocketNet::~SocketNet() = default;

ncclResult_t SocketNet::init() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (initialized_) return ncclSuccess;
  int family = socketFamilySetting();
  std::string list = envString("NCCL_SOCKET_IFNAME");
  if (!list.empty()) {
    devices_ = listInterfaces(list, family);
  } else {
    // As NCCL: real interfaces, else docker bridges, else loopback.
    for (const char* fallback : {"^docker,lo", "docker", "lo"}) {
      devices_ = listInterfaces(fallback, family);
      if (!devices_.empty()) break;
    }
  }
  if (devices_.size() > kMaxDevices) devices_.resize(kMaxDevices);
  if (devices_.empty()) {
    WARN("NET/Socket: no usable network interface (NCCL_SOCKET_IFNAME=%s, NCCL_SOCKET_FAMILY=%s)",
         list.empty() ? "<unset>" : list.c_str(), envString("NCCL_SOCKET_FAMILY", "<unset>").c_str());
    return ncclSystemError;
  }
  const SocketSettings settings = socketSettings();
  helperThreads_ = settings.threads;
  dataSockets_ = settings.dataSockets;
  std::string names;
  for (size_t i = 0; i < devices_.size(); ++i) {
    names += " [" + std::to_string(i) + "]" + devices_[i].name + ":" + devices_[i].address.hostToString();
  }
  INFO(kSubsysInit | kSubsysNet, "NET/Socket: using%s; %d data socket(s) per connection, %d helper thread(s) per comm",
       names.c_str(), dataSockets_, helperThreads_ < 2 ? 0 : helperThreads_);
  initialized_ = true;
  return ncclSuccess;
}

ncclResult_t SocketNet::checkDevice(const char* call, int dev) const {
  if (!initialized_) {
    WARN("NET/Socket: %s called before init()", call);
    return ncclInternalError;
  }
  if (dev < 0 || dev >= static_cast<int>(devices_.size())) {
    WARN("NET/Socket: %s: device %d does not exist (%zu devices)", call, dev, devices_.size());
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t SocketNet::devices(int* count) {
  if (count == nullptr) return invalid("devices(): null count");
  std::lock_guard<std::mutex> lock(mutex_);
  *count = static_cast<int>(devices_.size());
  return ncclSuccess;
}

ncclResult_t SocketNet::getProperties(int dev, NetProperties* props) {
  if (props == nullptr) return invalid("getProperties(): null properties");
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("getProperties()", dev));
  const std::string& ifname = devices_[dev].name;
  *props = NetProperties{};
  props->name = ifname;
  props->pciPath = pciPath(ifname);
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = kNetPtrHost;
  props->speed = linkSpeedMbps(ifname);
  props->maxComms = 65536;
  props->maxRecvs = 1;
  return ncclSuccess;
}

ncclResult_t SocketNet::listen(int dev, void* handle, NetListenComm** listenComm) {
  if (handle == nullptr || listenComm == nullptr) return invalid("listen(): null handle or listenComm");
  *listenComm = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("listen()", dev));
  Socket socket;
  CHORUS_CHECK(Socket::listen(devices_[dev].address, &socket));
  Handle wire{kHandleMagic, static_cast<uint32_t>(dataSockets_), socket.address().length(), {}, {0, 0}, 0};
  memcpy(wire.address, socket.address().sa(), wire.addressLength);
  if (getrandom(wire.key, sizeof(wire.key), 0) != static_cast<ssize_t>(sizeof(wire.key))) {
    WARN("NET/Socket: listen(): getrandom for the listener's key failed: %s", strerror(errno));
    return ncclSystemError;
  }
  memset(handle, 0, kNetHandleSize);
  memcpy(handle, &wire, sizeof(wire));
  INFO(kSubsysNet, "NET/Socket: listening on %s (%s)", socket.address().toString().c_str(), devices_[dev].name.c_str());
  auto listener = std::make_unique<SocketListener>(std::move(socket), static_cast<uint32_t>(dataSockets_), keyOf(wire));
  *listenComm = reinterpret_cast<NetListenComm*>(listener.get());
  listeners_.emplace(listener.get(), std::move(listener));
  return ncclSuccess;
}

ncclResult_t SocketNet::connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) {
  if (handle == nullptr || sendComm == nullptr) return invalid("connect(): null handle or sendComm");
  *sendComm = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  CHORUS_CHECK(checkDevice("connect()", dev));
  Handle wire;
  memcpy(&wire, handle, sizeof(wire));
  auto* connectId = static_cast<char*>(handle) + offsetof(Handle, connectId);
  if (wire.connectId == 0) {
    SocketAddress address;
    if (wire.magic != kHandleMagic || wire.dataSockets < 1 || wire.dataSockets > kMaxDataSockets ||
        wire.addressLength > sizeof(wire.address) ||
        !address.assign(reinterpret_cast<const sockaddr*>(wire.address), wire.addressLength)) {
      WARN("NET/Socket: connect(): not a socket net handle (magic %llx, %u data sockets, address length %u)",
           static_cast<unsigned long long>(wire.magic), wire.dataSockets, wire.addressLength);
      return ncclInvalidArgument;
    }
    auto pending = std::make_unique<PendingConnect>(address, wire.dataSockets, config.trafficClass, keyOf(wire));
    CHORUS_CHECK(pending->start());
    wire.connectId = nextConnectId_++;
    memcpy(connectId, &wire.connectId, sizeof(wire.connectId));
    pendingConnects_.emplace(wire.connectId, std::move(pending));
  }
  auto it = pendingConnects_.find(wire.connectId);
  if (it == pendingConnects_.end()) {
    WARN("NET/Socket: connect(): the handle names no pending connection (id %llu)",
         static_cast<unsigned long long>(wire.connectId));
    return ncclInvalidArgument;
  }
  bool ready = false;
  ncclResult_t result = it->second->progress(&ready);
  if (result != ncclSuccess || ready) {
    memset(connectId, 0, sizeof(wire.connectId));  // the handle may start a new connection
    auto comm = ready && result == ncclSuccess
                    ? std::make_unique<SocketComm>(/*sending=*/true, it->second->takeStreams())
                    : nullptr;
    pendingConnects_.erase(it);
    if (comm == nullptr) return result;
    CHORUS_CHECK(comm->startHelpers(static_cast<uint32_t>(helperThreads_)));
    INFO(kSubsysNet, "NET/Socket: connected to %s with %zu data socket(s), %u helper thread(s)",
         comm->peerName().c_str(), comm->dataSockets(), comm->helperThreads());
    *sendComm = reinterpret_cast<NetSendComm*>(comm.get());
    comms_.emplace(comm.get(), std::move(comm));
  }
  return ncclSuccess;
}

ncclResult_t SocketNet::accept(NetListenComm* listenComm, NetRecvComm** recvComm) {
  if (listenComm == nullptr || recvComm == nullptr) return invalid("accept(): null listenComm or recvComm");
  *recvComm = nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listeners_.find(listenComm);
  if (it == listeners_.end()) return invalid("accept(): not a listen comm of this net");
  std::vector<TcpStream> streams;
  CHORUS_CHECK(it->second->progress(&streams));
  if (streams.empty()) return ncclSuccess;
  auto comm = std::make_unique<SocketComm>(/*sending=*/false, std::move(streams));
  CHORUS_CHECK(comm->startHelpers(static_cast<uint32_t>(helperThreads_)));
  INFO(kSubsysNet, "NET/Socket: accepted a connection from %s on %s with %zu data socket(s), %u helper thread(s)",
       comm->peerName().c_str(), it->second->address().c_str(), comm->dataSockets(), comm->helperThreads());
  *recvComm = reinterpret_cast<NetRecvComm*>(comm.get());
  comms_.emplace(comm.get(), std::move(comm));
  return ncclSuccess;
}

ncclResult_t SocketNet::regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) {
  CHORUS_CHECK(checkRegMr("Socket", comm, data, size, type, mhandle));
  std::lock_guard<std::mutex> lock(mutex_);
  if (comms_.count(comm) == 0) return invalid("regMr(): not a send or receive comm of this net");
  *mhandle = hostRegistrationHandle();
  return ncclSuccess;
}

ncclResult_t SocketNet::deregMr(void* comm, NetMemHandle* mhandle) {
  if (comm == nullptr) return invalid("deregMr(): null comm");
  if (mhandle != nullptr && mhandle != hostRegistrationHandle()) return invalid("deregMr(): not a handle of regMr()");
  return ncclSuccess;
}

ncclResult_t SocketNet::isend(NetSendComm* comm, void* data, int size, int /*tag*/, NetMemHandle* /*mhandle*/,
                              NetRequest** request) {
  if (comm == nullptr || request == nullptr) return invalid("isend(): null comm or request");
  *request = nullptr;
  CHORUS_CHECK(checkNetBuffer("Socket", "isend", data, size));
  auto* socketComm = reinterpret_cast<SocketComm*>(comm);
  if (!socketComm->isKind(/*sending=*/true)) return invalid("isend(): not a send comm");
  return socketComm->post(static_cast<char*>(data), static_cast<size_t>(size), request);
}

ncclResult_t SocketNet::irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* /*tags*/,
                              NetMemHandle** /*mhandles*/, NetRequest** request) {
  if (comm == nullptr || request == nullptr || data == nullptr || sizes == nullptr) {
    return invalid("irecv(): null comm, data, sizes or request");
  }
  *request = nullptr;
  CHORUS_CHECK(checkSingleReceive("Socket", n, data, sizes));
  auto* socketComm = reinterpret_cast<SocketComm*>(comm);
  if (!socketComm->isKind(/*sending=*/false)) return invalid("irecv(): not a receive comm");
  return socketComm->post(static_cast<char*>(data[0]), static_cast<size_t>(sizes[0]), request);
}

ncclResult_t SocketNet::iflush(NetRecvComm* comm, int n, void** /*data*/, int* /*sizes*/, NetMemHandle** /*mhandles*/,
                               NetRequest** request) {
  if (comm == nullptr || request == nullptr || n < 1) return invalid("iflush(): null comm or request, or n < 1");
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t SocketNet::test(NetRequest* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) return invalid("test(): null request or done");
  auto* socketRequest = reinterpret_cast<SocketRequest*>(request);
  return socketRequest->comm->test(socketRequest, done, sizes);
}

bool SocketNet::waitSet(void* comm, std::vector<pollfd>* fds) {
  return comm != nullptr && reinterpret_cast<SocketComm*>(comm)->waitSet(fds);
}

ncclResult_t SocketNet::sendNote(void* comm, const void* note) {
  if (comm == nullptr || note == nullptr) return invalid("sendNote(): null comm or note");
  return reinterpret_cast<SocketComm*>(comm)->queueNote(note);
}

ncclResult_t SocketNet::takeNote(void* comm, void* note, uint64_t* after, bool* got) {
  if (comm == nullptr || note == nullptr || after == nullptr || got == nullptr) {
    return invalid("takeNote(): null argument");
  }
  return reinterpret_cast<SocketComm*>(comm)->takeNote(note, after, got);
}

ncclResult_t SocketNet::closeComm(SocketComm* comm, bool sending) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end() || !it->second->isKind(sending)) {
    WARN("NET/Socket: %s(): not a %s comm of this net", sending ? "closeSend" : "closeRecv",
         sending ? "send" : "receive");
    return ncclInvalidArgument;
  }
  comms_.erase(it);
  return ncclSuccess;
}

ncclResult_t SocketNet::closeSend(NetSendComm* comm) {
  if (comm == nullptr) return invalid("closeSend(): null comm");
  return closeComm(reinterpret_cast<SocketComm*>(comm), /*sending=*/true);
}

void SocketNet::abandonSend(NetSendComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = comms_.find(reinterpret_cast<SocketComm*>(comm));
  if (it != comms_.end() && it->second->isKind(/*sending=*/true)) it->second->abandon();
}

ncclResult_t SocketNet::closeRecv(NetRecvComm* comm) {
  if (comm == nullptr) return invalid("closeRecv(): null comm");
  return closeComm(reinterpret_cast<SocketComm*>(comm), /*sending=*/false);
}

ncclResult_t SocketNet::closeListen(NetListenComm* comm) {
  if (comm == nullptr) return invalid("closeListen(): null comm");
  std::lock_guard<std::mutex> lock(mutex_);
  if (listeners_.erase(comm) == 0) return invalid("closeListen(): not a listen comm of this net");
  return ncclSuccess;
}

}  // namespace chorus
