#include "transport/net/ib_comm.h"

#if CHORUS_HAVE_IBVERBS

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "core/debug.h"

namespace chorus {

IbComm::IbComm(bool sending, const IbPort& port, IbCq cq, IbQp qp, TcpStream stream)
    : magic_(sending ? kSendMagic : kRecvMagic),
      peer_(stream.peerName()),
      portName_(port.name),
      stream_(std::move(stream)),
      device_(port.device),
      cq_(std::move(cq)),
      qp_(std::move(qp)) {
  for (IbRequest& request : pool_) request.comm = this;
}

namespace {
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
}  // namespace

ncclResult_t IbComm::registerMemory(void* data, size_t size, NetMemHandle** handle) {
  return keepRegistration(
      data, size, [&] { return device_->api().regMr(device_->pd(), data, size, kAccess); }, "ibv_reg_mr", handle);
}

ncclResult_t IbComm::registerDmaBuf(void* data, size_t size, uint64_t offset, int fd, NetMemHandle** handle) {
  const IbVerbsApi& api = device_->api();
  if (api.regDmabufMr == nullptr) {
    WARN("NET/IB : dma-buf registration asked of %s, but this libibverbs has no ibv_reg_dmabuf_mr", portName_.c_str());
    return ncclInvalidUsage;
  }
  return keepRegistration(
      data, size,
      [&] { return api.regDmabufMr(device_->pd(), offset, size, reinterpret_cast<uintptr_t>(data), fd, kAccess); },
      "ibv_reg_dmabuf_mr", handle);
}

ncclResult_t IbComm::keepRegistration(void* data, size_t size, const std::function<ibv_mr*()>& reg, const char* call,
                                      NetMemHandle** handle) {
  auto memory = std::make_unique<IbMemory>();
  memory->begin = reinterpret_cast<uintptr_t>(data);
  memory->length = size;
  if (size > 0) {
    memory->mr = IbMr(&device_->api(), reg());
    if (!memory->mr) {
      WARN("NET/IB : %s(%p, %zu bytes) on %s failed: %s", call, data, size, portName_.c_str(), strerror(errno));
      return ncclSystemError;
    }
  }
  *handle = reinterpret_cast<NetMemHandle*>(memory.get());
  memory_.emplace(memory.get(), std::move(memory));
  return ncclSuccess;
}

ncclResult_t IbComm::deregisterMemory(NetMemHandle* handle) {
  if (memory_.erase(handle) == 0) {
    WARN("NET/IB : deregMr(): %p is not a registration of this comm (%s)", static_cast<void*>(handle),
         portName_.c_str());
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t IbComm::checkMemory(void* data, size_t size, NetMemHandle* handle, const IbMemory** memory) const {
  *memory = nullptr;
  if (handle == nullptr && size == 0) return ncclSuccess;
  auto it = memory_.find(handle);
  if (it == memory_.end()) {
    WARN("NET/IB : %s(): mhandle %p is not a registration of this comm (%s)", sending() ? "isend" : "irecv",
         static_cast<void*>(handle), portName_.c_str());
    return ncclInvalidArgument;
  }
  if (!it->second->contains(data, size)) {
    WARN("NET/IB : %s(): buffer %p of %zu bytes is outside its registration [%p, +%zu)", sending() ? "isend" : "irecv",
         data, size, reinterpret_cast<void*>(it->second->begin), it->second->length);
    return ncclInvalidArgument;
  }
  *memory = it->second.get();
  return ncclSuccess;
}

ncclResult_t IbComm::post(void* data, size_t size, NetMemHandle* handle, NetRequest** request) {
  *request = nullptr;
  if (error_ != ncclSuccess) return error_;
  const IbMemory* memory = nullptr;
  CHORUS_CHECK(checkMemory(data, size, handle, &memory));
  auto free = std::find_if(pool_.begin(), pool_.end(), [](auto& r) { return r.state == IbRequest::State::Free; });
  if (free == pool_.end()) return ncclSuccess;  // pool full: the caller retries later
  // A 0-byte message is a SEND without scatter/gather entries.
  ibv_sge sge{reinterpret_cast<uintptr_t>(data), static_cast<uint32_t>(size), size > 0 ? memory->lkey() : 0};
  uint64_t slot = static_cast<uint64_t>(free - pool_.begin());
  int error = 0;
  if (sending()) {
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = size > 0 ? &sge : nullptr;
    wr.num_sge = size > 0 ? 1 : 0;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    error = ibv_post_send(qp_.get(), &wr, &bad);
  } else {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = size > 0 ? &sge : nullptr;
    wr.num_sge = size > 0 ? 1 : 0;
    error = ibv_post_recv(qp_.get(), &wr, &bad);
  }
  if (error != 0) {
    WARN("NET/IB : %s of %zu bytes on %s (peer %s) failed: %s", sending() ? "ibv_post_send" : "ibv_post_recv", size,
         portName_.c_str(), peer_.c_str(), strerror(error));
    return error_ = ncclSystemError;
  }
  free->state = IbRequest::State::Active;
  free->size = size;
  *request = reinterpret_cast<NetRequest*>(&*free);
  return ncclSuccess;
}

ncclResult_t IbComm::test(IbRequest* request, int* done, int* size) {
  *done = 0;
  if (request->state == IbRequest::State::Free) {
    WARN("NET/IB : test(): the request is not posted");
    return ncclInvalidArgument;
  }
  if (request->state == IbRequest::State::Active) CHORUS_CHECK(poll());
  if (request->state == IbRequest::State::Complete) {
    *done = 1;
    if (size != nullptr) *size = static_cast<int>(request->size);
    request->state = IbRequest::State::Free;
  }
  return ncclSuccess;
}

// Retires what the completion queue holds, without waiting. A failed work request (and
// the flushes that follow it) ends the comm: RC queue pairs do not recover from errors.
ncclResult_t IbComm::poll() {
  if (error_ != ncclSuccess) return error_;
  ibv_wc completions[kMaxRequests];
  int n = ibv_poll_cq(cq_.get(), kMaxRequests, completions);
  if (n < 0) {
    WARN("NET/IB : ibv_poll_cq on %s (peer %s) failed (%d)", portName_.c_str(), peer_.c_str(), n);
    return error_ = ncclSystemError;
  }
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = completions[i];
    if (wc.wr_id >= pool_.size() || pool_[wc.wr_id].state != IbRequest::State::Active) {
      WARN("NET/IB : completion for unknown request %llu on %s", static_cast<unsigned long long>(wc.wr_id),
           portName_.c_str());
      return error_ = ncclInternalError;
    }
    IbRequest& request = pool_[wc.wr_id];
    if (wc.status != IBV_WC_SUCCESS) {
      const char* hint = wc.status == IBV_WC_LOC_LEN_ERR ? " (the message is larger than the posted receive)" : "";
      WARN("NET/IB : %s %s (%zu bytes) failed on %s: %s (status %d, vendor error 0x%x)%s",
           sending() ? "send to" : "receive from", peer_.c_str(), request.size, portName_.c_str(),
           device_->api().wcStatusStr(wc.status), wc.status, wc.vendor_err, hint);
      return error_ = ncclRemoteError;
    }
    if (!sending()) request.size = wc.byte_len;
    request.state = IbRequest::State::Complete;
  }
  return ncclSuccess;
}

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
