// What the executor tests share: a work item covering a whole call on channel 0 (as
// src/enqueue plans a one-channel call), and the rank-dependent inputs they reduce.
// Used by the team tests on the CPU (tests/unit) and by the GPU tests and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/work.h"

namespace chorus {
namespace fixtures {

inline WorkItem wholeCallItem(WorkKind kind, Algorithm algo, Protocol proto, ncclDataType_t dtype, const void* send,
                              void* recv, size_t count, int root, RedKind op = RedKind::Sum) {
  WorkItem w{};
  w.kind = kind;
  w.algo = algo;
  w.proto = proto;
  w.dtype = dtype;
  w.op.kind = op;
  w.sendbuff = send;
  w.recvbuff = recv;
  w.blockCount = count;
  w.root = root;
  w.channel = 0;
  w.range = ChannelRange{0, count};
  return w;
}

// Distinct per rank and index, negative as well as positive, exact as float.
inline int32_t rankInput(int rank, size_t i) {
  return static_cast<int32_t>(rank * 1000 + static_cast<int>(i % 977) * 7 - 300);
}

}  // namespace fixtures
}  // namespace chorus
