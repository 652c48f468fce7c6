// One side of an IB net connection once its queue pair is ready to send: the data path.
// A message is one RC SEND into the receive posted (in order) on the other side, so
// messages match in order, a larger message than the posted receive fails in hardware,
// and a send before its receive waits in hardware (rnr_retry 7: retry forever).
// test() polls the comm's completion queue; every request is signaled.
#pragma once

#include "transport/net/ib_device.h"

#if CHORUS_HAVE_IBVERBS

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "nccl.h"
#include "transport/net/net.h"
#include "transport/net/tcp_stream.h"

namespace chorus {

class IbComm;

// What isend/irecv hand out as a NetRequest: a slot of its comm's pool.
struct IbRequest {
  static constexpr uint32_t kMagic = 0x49425251u;  // "IBRQ"
  enum class State : uint8_t { Free, Active, Complete };
  uint32_t magic = kMagic;
  IbComm* comm = nullptr;
  State state = State::Free;
  size_t size = 0;  // send: the message; receive: the posted size, then the received one
};

// What regMr hands out as a NetMemHandle: one registration (none for 0 bytes).
struct IbMemory {
  IbMr mr;
  uintptr_t begin = 0;
  size_t length = 0;
  uint32_t lkey() const { return mr ? mr.get()->lkey : 0; }
  bool contains(const void* data, size_t size) const {
    auto at = reinterpret_cast<uintptr_t>(data);
    return at >= begin && size <= length && at - begin <= length - size;
  }
};

// regMr, deregMr, isend, irecv and test on one comm must come from one thread at a time
// (NCCL's proxy thread): the comm's registrations and pool are not locked.
class IbComm {
 public:
  // NCCL's IB net keeps this many requests per comm, like the socket net.
  static constexpr int kMaxRequests = 8;

  // `qp` is in RTS, connected to the peer at the other end of `stream`.
  IbComm(bool sending, const IbPort& port, IbCq cq, IbQp qp, TcpStream stream);
  IbComm(const IbComm&) = delete;
  IbComm& operator=(const IbComm&) = delete;

  // The magic tells a send comm from a receive comm behind an opaque pointer.
  bool isKind(bool sending) const { return magic_ == (sending ? kSendMagic : kRecvMagic); }
  bool sending() const { return magic_ == kSendMagic; }
  const std::string& peerName() const { return peer_; }
  const std::string& portName() const { return portName_; }

  // One MR per call, on the comm's device, with local write and remote read/write access.
  ncclResult_t registerMemory(void* data, size_t size, NetMemHandle** handle);
  // The same for GPU memory behind a dma-buf: `fd` covers `data` at `offset` (ibv_reg_dmabuf_mr).
  ncclResult_t registerDmaBuf(void* data, size_t size, uint64_t offset, int fd, NetMemHandle** handle);
  ncclResult_t deregisterMemory(NetMemHandle* handle);

  // Posts a send (or receive) of `size` bytes at `data`, which must lie inside `handle`'s
  // registration (`handle` may be null for 0 bytes). `*request` is null when the pool is full.
  ncclResult_t post(void* data, size_t size, NetMemHandle* handle, NetRequest** request);
  // Polls the completion queue; once `request` is complete sets `*done`, `*size` and frees it.
  ncclResult_t test(IbRequest* request, int* done, int* size);

 private:
  // Registers [data, data + size) with `reg` (named `call` in the WARN) and keeps the MR.
  ncclResult_t keepRegistration(void* data, size_t size, const std::function<ibv_mr*()>& reg, const char* call,
                                NetMemHandle** handle);
  static constexpr uint32_t kSendMagic = 0x49425343u;  // "IBSC"
  static constexpr uint32_t kRecvMagic = 0x49425243u;  // "IBRC"

  ncclResult_t checkMemory(void* data, size_t size, NetMemHandle* handle, const IbMemory** memory) const;
  ncclResult_t poll();

  uint32_t magic_;
  ncclResult_t error_ = ncclSuccess;  // a failed completion ends the comm
  std::string peer_;
  std::string portName_;
  // Declaration order is release order reversed: the QP goes first, then its CQ, the
  // memory registrations, the device (PD and context, when this was the last user) and
  // the out-of-band socket.
  TcpStream stream_;
  std::shared_ptr<IbDevice> device_;
  std::unordered_map<const void*, std::unique_ptr<IbMemory>> memory_;
  IbCq cq_;
  IbQp qp_;
  std::array<IbRequest, kMaxRequests> pool_;
};

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
