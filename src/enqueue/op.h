// One user call as recorded by the API layer, before planning.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "device/common/work.h"
#include "nccl.h"
#include "src/comm/user_red_ops.h"
#include "src/tune/tuner.h"

namespace chorus {

// What the planner chose for a call (buildLanes writes it where a profiler asks).
struct OpPlacement {
  Algorithm algo = Algorithm::Ring;
  Protocol proto = Protocol::Simple;
  int nChannels = 0;  // the channels given a share of the call; 0: not planned
  // The call's work items, as lane and index (the CPU executor's plan; a profiler's ProxyOp
  // events count their steps).
  struct Item {
    const Lane* lane;
    size_t index;
  };
  std::vector<Item> items;
};

// A profiler plugin's view of a call (src/profiler/profiler.h); empty without a plugin.
struct OpProfile {
  void* apiEvent = nullptr;          // the call's CollApi/P2pApi event: its Coll/P2p event's parent
  int mask = 0;                      // the plugin's activation mask when the call was made
  OpPlacement* placement = nullptr;  // where the planner writes its choice (set just before planning)
  uint64_t userTag = 0;              // the call's ncclCollConfig_t userProfilerTag (given to v7 plugins)
};

// Send and Recv: they move over a pair's own connections, not a channel's ring or tree.
inline bool isPointToPoint(WorkKind kind) { return kind == WorkKind::Send || kind == WorkKind::Recv; }

// A copy of data that ops read, taken when their launch starts rather than at the call, so
// that it holds what calls before them wrote there: an overlapping AlltoAll's send data,
// which its sends read while its receives overwrite the original. Shared by those ops, and
// kept until their launch ran.
struct StagedCopy {
  const void* from;
  size_t bytes;
  std::unique_ptr<std::byte[]> data;
  bool taken = false;
  void take() {
    if (taken) return;
    std::memcpy(data.get(), from, bytes);
    taken = true;
  }
};

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
  OpProfile profile{};
  // A PreMulSum op's definition (op >= ncclNumOps), copied at the call: NCCL lets the op be
  // destroyed, and its handle reused, as soon as the call returns.
  UserRedOp userOp{};
  // The copy the op's sendbuff points into, if any.
  std::shared_ptr<StagedCopy> staged{};
};

}  // namespace chorus
