// Argument checks every built-in Net makes the same way; the WARN names the net and call.
#pragma once

#include <cstddef>

#include "nccl.h"
#include "transport/net/net.h"

namespace chorus {

// A buffer handed to isend/irecv: a size >= 0, and data unless the size is 0.
ncclResult_t checkNetBuffer(const char* net, const char* call, const void* data, int size);

// regMr's arguments: a comm and an mhandle, data unless the size is 0, and a memory type
// the net takes (`ptrSupport`, kNetPtr* flags). *mhandle is cleared first, when there is one.
ncclResult_t checkRegMr(const char* net, const void* comm, const void* data, size_t size, int type,
                        NetMemHandle** mhandle, int ptrSupport = kNetPtrHost);

// irecv's arrays: the built-in nets take exactly one receive per call (maxRecvs 1).
ncclResult_t checkSingleReceive(const char* net, int n, void* const* data, const int* sizes);

}  // namespace chorus
