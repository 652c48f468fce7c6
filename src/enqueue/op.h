// One user call as recorded by the API layer, before planning.
#pragma once

#include <cstddef>

#include "device/common/work.h"
#include "nccl.h"
#include "src/tune/tuner.h"

namespace chorus {

struct CollOp {
  WorkKind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;  // per-rank block for AllGather (sendcount) and ReduceScatter (recvcount)
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root;                       // root, or the peer of Send/Recv
  cudaStream_t stream = nullptr;  // the user's stream (the CUDA executor launches on it)
  CallTuning tuning{};            // what the call's ncclCollConfig_t asks of algorithm and channels
};

}  // namespace chorus
