// makeIbNet() for builds without <infiniband/verbs.h> (or with CHORUS_NO_IBVERBS): a Net
// with no devices whose init() says why, so that callers fall back to the socket net.
#include "transport/net/ib_net.h"
#include "transport/net/ib_verbs_api.h"

#if !CHORUS_HAVE_IBVERBS

#include "core/debug.h"

namespace chorus {

namespace {

ncclResult_t invalid(const char* what) {
  WARN("NET/IB : %s", what);
  return ncclInvalidArgument;
}

// Built without <infiniband/verbs.h>: no devices; every call validates its arguments
// and fails, so callers see the same errors as from an IB net that found no HCA.
class IbNetUnavailable final : public Net {
 public:
  const char* name() const override { return "IB"; }
  ncclResult_t init() override {
    INFO(kSubsysInit | kSubsysNet, "NET/IB : built without libibverbs; the socket net will be used");
    return ncclSystemError;
  }
  ncclResult_t devices(int* count) override {
    if (count == nullptr) return invalid("devices(): null count");
    *count = 0;
    return ncclSuccess;
  }
  ncclResult_t getProperties(int dev, NetProperties* props) override {
    return props == nullptr ? invalid("getProperties(): null properties") : noDevice("getProperties()", dev);
  }
  ncclResult_t listen(int dev, void* handle, NetListenComm** listenComm) override {
    if (listenComm != nullptr) *listenComm = nullptr;
    if (handle == nullptr || listenComm == nullptr) return invalid("listen(): null handle or listenComm");
    return noDevice("listen()", dev);
  }
  using Net::connect;
  ncclResult_t connect(int dev, const NetCommConfig&, void* handle, NetSendComm** sendComm) override {
    if (sendComm != nullptr) *sendComm = nullptr;
    if (handle == nullptr || sendComm == nullptr) return invalid("connect(): null handle or sendComm");
    return noDevice("connect()", dev);
  }
  ncclResult_t accept(NetListenComm*, NetRecvComm** recvComm) override {
    if (recvComm != nullptr) *recvComm = nullptr;
    return invalid("accept(): not a listen comm of this net (built without libibverbs)");
  }
  ncclResult_t regMr(void*, void*, size_t, int, NetMemHandle** mhandle) override {
    if (mhandle != nullptr) *mhandle = nullptr;
    return invalid("regMr(): not a comm of this net (built without libibverbs)");
  }
  ncclResult_t deregMr(void*, NetMemHandle*) override {
    return invalid("deregMr(): not a comm of this net (built without libibverbs)");
  }
  ncclResult_t isend(NetSendComm*, void*, int, int, NetMemHandle*, NetRequest** request) override {
    if (request != nullptr) *request = nullptr;
    return invalid("isend(): not a send comm of this net (built without libibverbs)");
  }
  ncclResult_t irecv(NetRecvComm*, int, void**, int*, int*, NetMemHandle**, NetRequest** request) override {
    if (request != nullptr) *request = nullptr;
    return invalid("irecv(): not a receive comm of this net (built without libibverbs)");
  }
  ncclResult_t iflush(NetRecvComm*, int, void**, int*, NetMemHandle**, NetRequest** request) override {
    if (request != nullptr) *request = nullptr;
    return invalid("iflush(): not a receive comm of this net (built without libibverbs)");
  }
  ncclResult_t test(NetRequest*, int* done, int*) override {
    if (done != nullptr) *done = 0;
    return invalid("test(): not a request of this net (built without libibverbs)");
  }
  ncclResult_t closeSend(NetSendComm*) override { return invalid("closeSend(): not a send comm of this net"); }
  ncclResult_t closeRecv(NetRecvComm*) override { return invalid("closeRecv(): not a receive comm of this net"); }
  ncclResult_t closeListen(NetListenComm*) override { return invalid("closeListen(): not a listen comm of this net"); }

 private:
  static ncclResult_t noDevice(const char* call, int dev) {
    WARN("NET/IB : %s: device %d does not exist (0 devices: built without libibverbs)", call, dev);
    return ncclInvalidArgument;
  }
};

}  // namespace

std::unique_ptr<Net> makeIbNet() { return std::make_unique<IbNetUnavailable>(); }

}  // namespace chorus

#endif  // !CHORUS_HAVE_IBVERBS
