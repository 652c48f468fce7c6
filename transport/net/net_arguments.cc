#include "transport/net/net_arguments.h"

#include "core/debug.h"

namespace chorus {

ncclResult_t checkNetBuffer(const char* net, const char* call, const void* data, int size) {
  if (size < 0 || (data == nullptr && size > 0)) {
    WARN("NET/%s : %s(): bad buffer %p of %d bytes", net, call, data, size);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkRegMr(const char* net, const void* comm, const void* data, size_t size, int type,
                        NetMemHandle** mhandle, int ptrSupport) {
  if (mhandle != nullptr) *mhandle = nullptr;
  if (comm == nullptr || mhandle == nullptr) {
    WARN("NET/%s : regMr(): null comm or mhandle", net);
    return ncclInvalidArgument;
  }
  if (data == nullptr && size > 0) {
    WARN("NET/%s : regMr(): null data for %zu bytes", net, size);
    return ncclInvalidArgument;
  }
  if ((type != kNetPtrHost && type != kNetPtrCuda) || (type & ptrSupport) == 0) {
    WARN("NET/%s : regMr(): memory type %d is not supported (%s)", net, type,
         (ptrSupport & kNetPtrCuda) != 0 ? "host or CUDA memory" : "host memory only");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkSingleReceive(const char* net, int n, void* const* data, const int* sizes) {
  if (n != 1) {
    WARN("NET/%s : irecv(): %d receives at once; this net takes exactly 1 (maxRecvs)", net, n);
    return ncclInvalidArgument;
  }
  return checkNetBuffer(net, "irecv", data[0], sizes[0]);
}

}  // namespace chorus
