// The socket net: Net over TCP, IPv4 or IPv6, one device per usable interface.
//
// Settings, as in NCCL:
//   NCCL_SOCKET_IFNAME     interfaces to use (prefixes; '^' excludes, '=' exact names).
//                          Default: any but docker* and lo; else docker*; else lo.
//   NCCL_SOCKET_FAMILY     AF_INET or AF_INET6.
//   NCCL_NSOCKS_PERTHREAD, NCCL_SOCKET_NTHREADS
//                          their product is the number of data sockets per connection
//                          (default 1, at most 64). The receiver's values win: they
//                          travel in the listen handle. NCCL_SOCKET_NTHREADS (at most
//                          16) is also each side's helper threads per comm, see below.
//
// A connection is one control socket plus the data sockets. A message is a header (its
// size) on the control socket and the payload cut into one contiguous range per data
// socket (at least kMinChunkBytes each), so several TCP streams carry a large message.
// With NCCL_SOCKET_NTHREADS unset or 1 there are no helper threads: test() runs a
// non-blocking state machine over the sockets of its comm, moving whatever the kernel
// accepts, and returns (a 2-core machine pays for no idle threads). With 2 or more, each
// send and receive comm starts that many helper threads (at most one per data socket of
// the connection); helper t owns an even share of the data sockets, moves their ranges
// of each announced message and sleeps in poll() when it has none. test() then keeps the
// control socket and the headers, and reports completion once every range is in.
//
// This file owns devices and the maps from opaque handles to objects; the parts live in
// socket_net_wire.h (format), tcp_stream (non-blocking socket), pending_connect and
// socket_listener (connection setup, both sides) and socket_comm (the data path).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/interfaces.h"
#include "transport/net/net.h"
#include "transport/net/socket_net_wire.h"  // the wire format, for tests that play a misbehaving peer

namespace chorus {

class SocketListener;
class SocketComm;
class PendingConnect;

class SocketNet final : public Net {
 public:
  // NCCL's socket net keeps this many requests per comm.
  static constexpr int kMaxRequests = 8;

  SocketNet();
  ~SocketNet() override;  // closes every comm still open
  SocketNet(const SocketNet&) = delete;
  SocketNet& operator=(const SocketNet&) = delete;

  const char* name() const override { return "Socket"; }
  ncclResult_t init() override;
  ncclResult_t devices(int* count) override;
  ncclResult_t getProperties(int dev, NetProperties* props) override;
  ncclResult_t listen(int dev, void* handle, NetListenComm** listenComm) override;
  using Net::connect;
  ncclResult_t connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) override;
  ncclResult_t accept(NetListenComm* listenComm, NetRecvComm** recvComm) override;
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) override;
  ncclResult_t deregMr(void* comm, NetMemHandle* mhandle) override;
  ncclResult_t isend(NetSendComm* comm, void* data, int size, int tag, NetMemHandle* mhandle,
                     NetRequest** request) override;
  ncclResult_t irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* tags, NetMemHandle** mhandles,
                     NetRequest** request) override;
  ncclResult_t iflush(NetRecvComm* comm, int n, void** data, int* sizes, NetMemHandle** mhandles,
                      NetRequest** request) override;
  ncclResult_t test(NetRequest* request, int* done, int* sizes) override;
  bool waitSet(void* comm, std::vector<pollfd>* fds) override;
  bool supportsNotes() const override { return true; }
  ncclResult_t sendNote(void* comm, const void* note) override;
  ncclResult_t takeNote(void* comm, void* note, uint64_t* after, bool* got) override;
  ncclResult_t closeSend(NetSendComm* comm) override;
  ncclResult_t closeRecv(NetRecvComm* comm) override;
  void abandonSend(NetSendComm* comm) override;
  ncclResult_t closeListen(NetListenComm* comm) override;

  // Data sockets per connection this net's listeners ask for (after clamping).
  int dataSocketsPerConnection() const { return dataSockets_; }
  // NCCL_SOCKET_NTHREADS after clamping; helper threads run per comm only when >= 2.
  int helperThreadsSetting() const { return helperThreads_; }

 private:
  ncclResult_t checkDevice(const char* call, int dev) const;
  ncclResult_t closeComm(SocketComm* comm, bool sending);

  bool initialized_ = false;
  std::vector<NetInterface> devices_;
  int dataSockets_ = 1;
  int helperThreads_ = 1;
  // Listen, connect, accept and close may come from different threads; data calls on
  // one comm come from one thread at a time and do not take this lock.
  std::mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<SocketListener>> listeners_;
  std::unordered_map<const void*, std::unique_ptr<SocketComm>> comms_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingConnect>> pendingConnects_;
  uint64_t nextConnectId_ = 1;
};

}  // namespace chorus
