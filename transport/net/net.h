// Chorus' internal network interface, with the semantics of NCCL's ncclNet_v8 table, so
// that the proxy drives the built-in socket net, an IB verbs net and external plugins
// the same way (a plugin adapter passes its void* objects through these opaque types).
//
// Life of a connection:
//   receiver: listen(dev, handle, &listenComm); send the handle (kNetHandleSize bytes)
//             to the sender out of band; accept(listenComm, &recvComm) until non-null.
//   sender:   connect(dev, handle, &sendComm) until non-null, always passing the same
//             handle buffer: an implementation may keep its progress in it.
// connect and accept never block; a null comm with ncclSuccess means "call again".
//
// Data: isend/irecv post a request and return it, or a null request (with ncclSuccess)
// when the comm's request pool is full. test() progresses the comm without blocking and
// reports done and the received size; a done request is released. Messages arrive in the
// order they were sent; a receive posted larger than the message completes with the
// message's size, a smaller one is an error.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus {

// NCCL_NET_HANDLE_MAXSIZE: the listen handle the receiver sends to the sender.
inline constexpr size_t kNetHandleSize = 128;
// A note's size (see Net::sendNote): a PeerCall.
inline constexpr size_t kNetNoteBytes = 40;

// NCCL_PTR_*: what memory a net can send from and receive into.
inline constexpr int kNetPtrHost = 0x1;
inline constexpr int kNetPtrCuda = 0x2;
inline constexpr int kNetPtrDmaBuf = 0x4;

// Opaque objects handed out by a Net; only the Net that made one may be given it back.
struct NetListenComm;
struct NetSendComm;
struct NetRecvComm;
struct NetRequest;
struct NetMemHandle;

// ncclNetProperties_v8_t.
struct NetProperties {
  std::string name;     // for logs: the interface or HCA name
  std::string pciPath;  // /sys path of the PCI device, empty when there is none
  uint64_t guid = 0;    // unique per NIC
  int ptrSupport = kNetPtrHost;
  int speed = 0;  // Mbps
  int port = 0;
  float latency = 0;  // us; 0 when unknown
  int maxComms = 0;
  int maxRecvs = 1;  // receives grouped into one irecv
};

// What a communicator asks of each connection it opens (NCCL's ncclNetCommConfig_t).
inline constexpr int kNetTrafficClassUndef = -1;
struct NetCommConfig {
  int trafficClass = kNetTrafficClassUndef;  // 0-255 (ncclConfig_t.trafficClass), or the net's default
};

class Net {
 public:
  virtual ~Net() = default;

  virtual const char* name() const = 0;
  // Finds the devices. Called once before anything else.
  virtual ncclResult_t init() = 0;
  virtual ncclResult_t devices(int* count) = 0;
  virtual ncclResult_t getProperties(int dev, NetProperties* props) = 0;

  // `handle` points to kNetHandleSize bytes, filled here for the sender.
  virtual ncclResult_t listen(int dev, void* handle, NetListenComm** listenComm) = 0;
  virtual ncclResult_t connect(int dev, const NetCommConfig& config, void* handle, NetSendComm** sendComm) = 0;
  // With the net's defaults. (Overriders say `using Net::connect;` to keep this one.)
  ncclResult_t connect(int dev, void* handle, NetSendComm** sendComm) {
    return connect(dev, NetCommConfig{}, handle, sendComm);
  }
  virtual ncclResult_t accept(NetListenComm* listenComm, NetRecvComm** recvComm) = 0;

  // `comm` is a NetSendComm* or NetRecvComm*; `type` one of kNetPtr*.
  virtual ncclResult_t regMr(void* comm, void* data, size_t size, int type, NetMemHandle** mhandle) = 0;
  virtual ncclResult_t deregMr(void* comm, NetMemHandle* mhandle) = 0;
  // GPU memory (`type` kNetPtrCuda) registered through a dma-buf: `fd` covers `data` at
  // `offset`. Only for a net whose ptrSupport has kNetPtrDmaBuf; the others refuse.
  virtual ncclResult_t regMrDmaBuf(void* /*comm*/, void* /*data*/, size_t /*size*/, int /*type*/, uint64_t /*offset*/,
                                   int /*fd*/, NetMemHandle** /*mhandle*/) {
    return ncclInvalidUsage;
  }

  virtual ncclResult_t isend(NetSendComm* comm, void* data, int size, int tag, NetMemHandle* mhandle,
                             NetRequest** request) = 0;
  // `n` receives at once (at most maxRecvs), each with its buffer, size, tag and mhandle.
  virtual ncclResult_t irecv(NetRecvComm* comm, int n, void** data, int* sizes, int* tags, NetMemHandle** mhandles,
                             NetRequest** request) = 0;
  // Makes received data visible to the device; a null request means nothing was needed.
  virtual ncclResult_t iflush(NetRecvComm* comm, int n, void** data, int* sizes, NetMemHandle** mhandles,
                              NetRequest** request) = 0;
  // `sizes` (may be null) gets one size per receive of the request once done.
  virtual ncclResult_t test(NetRequest* request, int* done, int* sizes) = 0;

  // For a proxy about to sleep: appends the poll() entries (sockets and events) whose
  // readiness would let `comm` (a NetSendComm* or NetRecvComm*) progress its posted
  // requests. False when the net cannot say (no sockets, or threads of its own moving
  // the data): the proxy then polls it with test().
  virtual bool waitSet(void* /*comm*/, std::vector<pollfd>* /*fds*/) { return false; }

  // Notes (optional; supportsNotes() says): a record of kNetNoteBytes that either end of
  // a connection sends the other outside the stream of messages, the newest winning. The
  // proxy relays with them where each end of a FIFO is (step_stamps.h, PeerCall), so a
  // long wait can tell a mismatched call over the network too. sendNote queues `note`
  // (replacing one not yet on its way) and moves what it can; a send comm's note goes
  // behind the messages posted before it. takeNote moves notes both ways without
  // blocking and returns the newest one not yet taken, with `*after`: how many messages
  // the sender had posted before it (0 on a send comm, whose peer posts none).
  virtual bool supportsNotes() const { return false; }
  virtual ncclResult_t sendNote(void* /*comm*/, const void* /*note*/) { return ncclInternalError; }
  virtual ncclResult_t takeNote(void* /*comm*/, void* /*note*/, uint64_t* /*after*/, bool* got) {
    *got = false;
    return ncclSuccess;
  }

  // Close and free a comm; its outstanding requests die with it.
  virtual ncclResult_t closeSend(NetSendComm* comm) = 0;
  virtual ncclResult_t closeRecv(NetRecvComm* comm) = 0;
  // The connection failed: closing `comm` need not wait until its last bytes reached the
  // peer (the socket net waits for that on a normal close).
  virtual void abandonSend(NetSendComm* /*comm*/) {}
  virtual ncclResult_t closeListen(NetListenComm* comm) = 0;
};

}  // namespace chorus
