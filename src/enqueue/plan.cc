#include "src/enqueue/plan.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "device/common/ordered_algorithms.h"

namespace chorus {
namespace {

bool isFloating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

// `value` in the storage format of `dtype`, in the low bytes of a 64-bit word.
uint64_t encodeScalar(ncclDataType_t dtype, double value) {
  uint64_t bits = 0;
  dispatchType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_arithmetic_v<T>) {
      v = static_cast<T>(value);
    } else {
      v = fromFloat<T>(static_cast<float>(value));
    }
    memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

// Appends the item in place: building it on the stack and copying it made GCC store it
// in pieces and reload it whole, a store-forwarding stall that cost a fifth of a small call.
void appendItem(Lane& lane, const CollOp& op, const RedOpArgs& red, TuneChoice how, int channel, ChannelRange range,
                const CallStamp& stamp) {
  if (op.profile.placement != nullptr) op.profile.placement->items.push_back({&lane, lane.items.size()});
  WorkItem& w = lane.items.emplace_back();
  w.kind = op.kind;
  w.algo = how.algo;
  w.proto = how.proto;
  w.dtype = op.dtype;
  w.op = red;
  w.sendbuff = op.sendbuff;
  w.recvbuff = op.recvbuff;
  w.blockCount = op.count;
  w.root = op.root;
  w.channel = channel;
  w.range = range;
  w.stamp = stamp;
}

// Whether a Recv offers its buffer to its sender (device/common/simple_primitives.h,
// beginP2p): the buffer lies in one of the communicator's registrations that allows it.
bool offersRecvBuffer(ncclComm* comm, const CollOp& op) {
  const size_t bytes = op.count * typeSize(op.dtype);
  std::lock_guard<std::mutex> lock(comm->regMutex);
  for (const BufferRegistration& r : comm->registrations)
    if (r.offerable && r.covers(op.recvbuff, bytes)) return true;
  return false;
}

// Where a profiler asks: what the planner chose for `op` (its items are recorded as appended).
void place(const CollOp& op, TuneChoice how, int nChannels) {
  if (op.profile.placement == nullptr) return;
  op.profile.placement->algo = how.algo;
  op.profile.placement->proto = how.proto;
  op.profile.placement->nChannels = nChannels;
}

// The call's fingerprint (device/common/call_stamp.h): numbered in the order the peers'
// matching calls count — collectives per communicator, sends and receives per pair — and
// described as both sides must agree. Left blank for the steps with CHORUS_FINGERPRINTS=0.
// Also recorded in the communicator's flight record (the hang report's last calls).
CallStamp stampOf(ncclComm* comm, const CollOp& op, const RedOpArgs& red, TuneChoice how, bool onBoard = false) {
  CallStamp s;
  s.kind = static_cast<uint8_t>(op.kind);
  s.algoProto = static_cast<uint8_t>(static_cast<int>(how.algo) << 4 | static_cast<int>(how.proto) |
                                     (onBoard ? kStampOnBoard : 0));
  if (op.kind == WorkKind::Send || op.kind == WorkKind::Recv) {
    s.count = op.count * typeSize(op.dtype);
    s.seq = ++(op.kind == WorkKind::Send ? comm->sendSeq : comm->recvSeq)[op.root];
    comm->flight.started(s, op.root);
    return comm->fingerprints ? s : CallStamp{};  // off: steps carry their bytes only
  }
  s.count = op.count;
  s.dtype = static_cast<uint8_t>(op.dtype);
  s.redOp = combinesValues(op.kind) ? static_cast<uint8_t>(red.kind) : 0;
  s.root = op.kind == WorkKind::Broadcast || op.kind == WorkKind::Reduce ? op.root : -1;
  s.seq = ++comm->collSeq;
  comm->flight.started(s, -1);
  s.seq |= comm->stampTag;  // nonzero where ring and tree connections are shared
  return comm->fingerprints ? s : CallStamp{};
}

// Splits [0, count) over the channels in pieces aligned to 64 elements: `per` elements
// each (sharePerChannel), the last channels' shares possibly short or empty.
size_t sharePerChannel(size_t count, int nChannels) {
  if (nChannels == 1) return count;
  const size_t per = (count + nChannels - 1) / nChannels;
  return (per + 63) / 64 * 64;
}
ChannelRange channelShare(size_t count, int channel, size_t per) {
  size_t begin = std::min(count, per * channel);
  size_t end = std::min(count, begin + per);
  return ChannelRange{begin, end - begin};
}

}  // namespace

CollKind collKindOf(WorkKind kind) {
  switch (kind) {
    case WorkKind::AllReduce:
      return CollKind::AllReduce;
    case WorkKind::ReduceScatter:
      return CollKind::ReduceScatter;
    case WorkKind::AllGather:
      return CollKind::AllGather;
    case WorkKind::Broadcast:
      return CollKind::Broadcast;
    case WorkKind::Reduce:
      return CollKind::Reduce;
    default:
      return CollKind::SendRecv;
  }
}

size_t tunedBytes(const ncclComm* comm, const CollOp& op) {
  const size_t bytes = op.count * typeSize(op.dtype);
  const bool perRank = op.kind == WorkKind::AllGather || op.kind == WorkKind::ReduceScatter;
  return perRank ? bytes * comm->nranks : bytes;
}

ncclResult_t resolveRedOp(const ncclComm* comm, const CollOp& call, RedOpArgs* out) {
  *out = RedOpArgs{};
  const ncclDataType_t dtype = call.dtype;
  switch (call.op) {
    case ncclSum:
      out->kind = RedKind::Sum;
      return ncclSuccess;
    case ncclProd:
      out->kind = RedKind::Prod;
      return ncclSuccess;
    case ncclMax:
      out->kind = RedKind::Max;
      return ncclSuccess;
    case ncclMin:
      out->kind = RedKind::Min;
      return ncclSuccess;
    case ncclAvg:
      if (isFloating(dtype)) {
        out->kind = RedKind::PreMulSum;
        out->scalarBits = encodeScalar(dtype, 1.0 / comm->nranks);
      } else {
        out->kind = RedKind::SumPostDiv;
        out->divisor = comm->nranks;
      }
      return ncclSuccess;
    default:
      break;
  }
  if (static_cast<int>(call.op) < static_cast<int>(ncclNumOps) || call.userOp.dtype != dtype) {
    WARN("Internal error: op %d of %s reached the plan without a definition of it", static_cast<int>(call.op),
         typeName(dtype));  // the call's check copies a PreMulSum op's definition
    return ncclInternalError;
  }
  const UserRedOp& user = call.userOp;
  out->kind = RedKind::PreMulSum;
  out->scalarBits = user.scalarBits;
  out->scalarPtr = user.residence == ncclScalarDevice ? user.scalarPtr : nullptr;
  return ncclSuccess;
}

ncclResult_t buildLanes(ncclComm* comm, const std::vector<CollOp>& ops, std::vector<Lane*>* lanes) {
  PlanLanes& plan = *comm->plan;
  const int nChannels = static_cast<int>(comm->channels.size());
  const Lane empty{&comm->view, {}};
  plan.channels.resize(nChannels, empty);
  for (Lane& lane : plan.channels) lane.items.clear();
  for (auto& [peer, lane] : plan.sends) lane.items.clear();
  for (auto& [peer, lane] : plan.recvs) lane.items.clear();
  plan.selfCopy = empty;  // keeps the items' storage
  plan.selfSends.clear();
  plan.selfRecvs.clear();

  for (const CollOp& op : ops) {
    RedOpArgs red;
    if (combinesValues(op.kind)) {
      CHORUS_CHECK(resolveRedOp(comm, op, &red));
    }
    TuneChoice how = comm->tuner->choose(collKindOf(op.kind), tunedBytes(comm, op), op.tuning);
    // Deterministic mode's ordered programs run on the ring (device/common/ordered_algorithms.h).
    if (runsOrdered(comm->deterministic, op.kind, comm->nranks, red.kind)) how.algo = Algorithm::Ring;
    if (op.kind == WorkKind::Send || op.kind == WorkKind::Recv) {
      place(op, how, 1);
      if (op.root == comm->rank) {
        (op.kind == WorkKind::Send ? plan.selfSends : plan.selfRecvs).push_back(&op);
        continue;
      }
      auto& byPeer = op.kind == WorkKind::Send ? plan.sends : plan.recvs;
      Lane& lane = byPeer.try_emplace(op.root, empty).first->second;
      appendItem(lane, op, red, how, 0, ChannelRange{0, op.count}, stampOf(comm, op, red, how));
      if (op.kind == WorkKind::Recv && how.proto == Protocol::Simple)
        lane.items.back().recvOffered = offersRecvBuffer(comm, op);
      continue;
    }
    // A small AllReduce of a communicator with a board may run there, whole on channel 0.
    const bool onBoard =
        comm->view.board != nullptr &&
        comm->tuner->onBoard(collKindOf(op.kind), tunedBytes(comm, op), how.algo, how.proto, op.tuning.maxChannels);
    const CallStamp stamp = stampOf(comm, op, red, how, onBoard);
    // A call's maxCTAs and a tuner plugin's nChannels leave the higher channels out of it;
    // every rank leaves the same ones.
    int callChannels = onBoard ? 1 : nChannels;
    if (op.tuning.maxChannels > 0) callChannels = std::min(callChannels, op.tuning.maxChannels);
    if (how.maxChannels > 0) callChannels = std::min(callChannels, how.maxChannels);
    const size_t per = sharePerChannel(op.count, callChannels);
    int channelsUsed = 0;
    for (int c = 0; c < callChannels; ++c) {
      ChannelRange share = channelShare(op.count, c, per);
      if (share.count == 0 && c > 0) continue;  // channel 0 still runs an empty call (keeps ranks in step)
      appendItem(plan.channels[c], op, red, how, c, share, stamp);
      plan.channels[c].items.back().board = onBoard;
      ++channelsUsed;
    }
    place(op, how, channelsUsed);
  }

  if (plan.selfSends.size() != plan.selfRecvs.size()) {
    WARN("Rank %d: %zu sends to self but %zu receives from self in one group", comm->rank, plan.selfSends.size(),
         plan.selfRecvs.size());
    return ncclInvalidUsage;
  }
  for (size_t i = 0; i < plan.selfSends.size(); ++i) {
    const CollOp& s = *plan.selfSends[i];
    const CollOp& r = *plan.selfRecvs[i];
    if (s.count * typeSize(s.dtype) != r.count * typeSize(r.dtype)) {
      WARN("Rank %d: send to self of %zu bytes matched with a receive of %zu bytes", comm->rank,
           s.count * typeSize(s.dtype), r.count * typeSize(r.dtype));
      return ncclInvalidUsage;
    }
    CollOp copy{WorkKind::LocalCopy, s.sendbuff, r.recvbuff, s.count, s.dtype, ncclSum, comm->rank};
    appendItem(plan.selfCopy, copy, RedOpArgs{}, TuneChoice{Algorithm::Ring, Protocol::Simple, 0}, 0,
               ChannelRange{0, s.count}, CallStamp{});
  }

  for (Lane& lane : plan.channels)
    if (!lane.items.empty()) lanes->push_back(&lane);
  for (auto& [peer, lane] : plan.sends)
    if (!lane.items.empty()) lanes->push_back(&lane);
  for (auto& [peer, lane] : plan.recvs)
    if (!lane.items.empty()) lanes->push_back(&lane);
  if (!plan.selfCopy.items.empty()) lanes->push_back(&plan.selfCopy);
  return ncclSuccess;
}

}  // namespace chorus
