// The plan structure both executors consume: src/enqueue turns each call (or a
// whole group) into work items, grouped into lanes. A lane is a sequence of items
// that one executor context (a fiber on the CPU, a thread block on a GPU) runs in
// order; different lanes progress concurrently.
//
// Rule: a leaf. It names the connection ends it hands out (step_fifo.h) and nothing of
// how work runs: no algorithm, primitive or executor header, so the host runtime and
// either executor can include it without pulling in the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/common/call_stamp.h"
#include "device/common/step_fifo.h"  // FifoEnd, Algorithm, Protocol, kMaxPeers
#include "nccl.h"

namespace chorus {

// The reduction an item applies (reduce_ops.h implements each).
enum class RedKind : int { Sum, Prod, Max, Min, PreMulSum, SumPostDiv };

// A channel's share of a call: elements [offset, offset + count) of each rank's block.
struct ChannelRange {
  size_t offset;
  size_t count;
};

// LocalCopy: a send to self matched with a receive from self.
enum class WorkKind : uint8_t { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Send, Recv, LocalCopy };
static_assert(static_cast<uint8_t>(WorkKind::Send) == kStampSend && static_cast<uint8_t>(WorkKind::Recv) == kStampRecv);

// The kinds that combine the ranks' values with an op; the others move bytes.
CHORUS_HD constexpr bool combinesValues(WorkKind kind) {
  return kind == WorkKind::AllReduce || kind == WorkKind::ReduceScatter || kind == WorkKind::Reduce;
}

// A reduction op resolved for one call: built-in ops map to these kinds, ncclAvg to
// PreMulSum(1/n) for floating types and SumPostDiv(n) for integers (as NCCL does).
struct RedOpArgs {
  RedKind kind = RedKind::Sum;
  uint64_t scalarBits = 0;          // PreMulSum's scalar, in the call's data type
  const void* scalarPtr = nullptr;  // ncclScalarDevice: read when the work runs
  int divisor = 1;                  // SumPostDiv's divisor
};

struct WorkItem {
  WorkKind kind;
  Algorithm algo;
  Protocol proto;
  ncclDataType_t dtype;
  RedOpArgs op;
  const void* sendbuff;
  void* recvbuff;
  size_t blockCount;  // elements of one rank's block (AllGather/ReduceScatter), else of the buffer
  int root;           // root, or the peer of Send/Recv
  int channel;
  ChannelRange range;  // this channel's share
  CallStamp stamp;     // the call it is part of, as its steps tell the peers (call_stamp.h)
  // A Recv whose buffer the sender may write into directly (registered with
  // ncclCommRegister; SimplePrimitives::beginP2p).
  bool recvOffered = false;
  bool board = false;  // an AllReduce on the board (board.h), whole on channel 0
};

// A channel's tree neighbours and the connections to them.
struct TreeView {
  int parent = -1;  // -1 at the root
  int nChildren = 0;
  FifoEnd* sendUp = nullptr;          // to the parent
  FifoEnd* recvDown = nullptr;        // from the parent
  FifoEnd* recvUp[kMaxPeers] = {};    // from each child
  FifoEnd* sendDown[kMaxPeers] = {};  // to each child
};

// What a channel's program may touch: its ring and tree connectors and ring order.
struct ChannelView {
  FifoEnd* ringRecv = nullptr;
  FifoEnd* ringSend = nullptr;
  const int* ringRanks = nullptr;  // ringRanks[k]: user rank k hops downstream; [0] is self
  TreeView tree;
};

struct CommView {
  int rank = 0;
  int nranks = 1;
  int nChannels = 0;
  ChannelView* channels = nullptr;
  FifoEnd* const* p2pSend = nullptr;  // indexed by peer; null until connected
  FifoEnd* const* p2pRecv = nullptr;
  bool ordered = false;             // deterministic mode: reductions run ordered_algorithms.h's programs
  FifoEnd* const* board = nullptr;  // indexed by rank: the board's blocks (board.h); null: no board
};

// One lane of a plan: items that run in order on one communicator.
struct Lane {
  const CommView* comm;
  std::vector<WorkItem> items;
};

}  // namespace chorus
