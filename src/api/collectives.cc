// Collective and point-to-point entry points: validate, record, and (outside a
// group) run. AlltoAll, Gather and Scatter are grouped sends and receives, as in NCCL.
// Each collective has a plain and an nccl*Config form (NCCL 2.31+): one Call, the
// second also reads a per-call ncclCollConfig_t (coll_config.h).
#include <memory>

#include "core/debug.h"
#include "device/common/datatypes.h"
#include "src/api/coll_config.h"
#include "src/api/export.h"
#include "src/api/validate.h"
#include "src/enqueue/plan.h"
#include "src/executor/executor_choice.h"
#include "src/fault/fault_injection.h"
#include "src/group/group.h"

using namespace chorus;

namespace {

struct Call {
  const char* func;
  WorkKind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root;
  bool reduces = false;  // takes an op
  bool rooted = false;   // takes a root (or a peer)
  bool sendAtRootOnly = false;
  bool recvAtRootOnly = false;
  bool needsSend = true;
  bool needsRecv = true;
  // A buffer that holds a block of `count` per rank (the other holds one block, or also one
  // per rank: AlltoAll).
  bool sendPerRank = false;
  bool recvPerRank = false;
  const char* rootName = "root";
};

// Whether the call's two buffers share any byte.
bool buffersOverlap(const void* send, size_t sendBytes, const void* recv, size_t recvBytes) {
  const auto s = reinterpret_cast<uintptr_t>(send);
  const auto r = reinterpret_cast<uintptr_t>(recv);
  return !(s + sendBytes <= r || r + recvBytes <= s);
}

// Buffers that overlap must be NCCL's in-place form: the same address, or the one-block
// buffer at this rank's block of the per-rank one (AllGather, ReduceScatter; Gather and
// Scatter at their root). Any other overlap would read what the call already wrote: NCCL
// returns whatever that gives, Chorus refuses it. AlltoAll, which has no in-place form,
// copies its send data first where the buffers overlap (stagedAlltoAllSource).
ncclResult_t checkInPlaceForm(const Call& c, const ncclComm* comm) {
  if (c.sendPerRank && c.recvPerRank) return ncclSuccess;
  const size_t block = c.count * typeSize(c.dtype);
  const size_t sendBytes = c.sendPerRank ? block * comm->nranks : block;
  const size_t recvBytes = c.recvPerRank ? block * comm->nranks : block;
  if (!buffersOverlap(c.sendbuff, sendBytes, c.recvbuff, recvBytes)) return ncclSuccess;
  const auto send = reinterpret_cast<uintptr_t>(c.sendbuff);
  const auto recv = reinterpret_cast<uintptr_t>(c.recvbuff);
  const uintptr_t mine = block * static_cast<uintptr_t>(comm->rank);
  if (c.recvPerRank ? send == recv + mine : c.sendPerRank ? recv == send + mine : send == recv) return ncclSuccess;
  const char* form = c.recvPerRank   ? "sendbuff == recvbuff + rank * count"
                     : c.sendPerRank ? "recvbuff == sendbuff + rank * count"
                                     : "recvbuff == sendbuff";
  WARN(
      "%s: invalid argument: sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap, but not in place (%s, rank "
      "%d)",
      c.func, c.sendbuff, sendBytes, static_cast<const void*>(c.recvbuff), recvBytes, form, comm->rank);
  return ncclInvalidArgument;
}

// Fills *userOp where the call takes a PreMulSum op (c.reduces).
ncclResult_t validate(const Call& c, const CommCall& held, ncclComm* comm, UserRedOp* userOp = nullptr) {
  CHORUS_CHECK(held.check(c.func));
  CHORUS_CHECK(checkReady(comm, c.func));
  CHORUS_CHECK(checkDatatype(c.dtype, c.func));
  if (c.reduces) CHORUS_CHECK(checkRedOp(comm, c.op, c.dtype, c.func, userOp));
  if (c.rooted) CHORUS_CHECK(checkRank(c.root, comm->nranks, c.rootName, c.func));
  CHORUS_CHECK(checkCount(c.count, c.dtype, c.sendPerRank || c.recvPerRank ? comm->nranks : 1, c.func));
  if (c.count > 0) {
    const bool isRoot = c.rooted && c.root == comm->rank;
    const bool sends = c.needsSend && (!c.sendAtRootOnly || isRoot);
    const bool receives = c.needsRecv && (!c.recvAtRootOnly || isRoot);
    if (sends) {
      CHORUS_CHECK(checkNotNull(c.sendbuff, "sendbuff", c.func));
      CHORUS_CHECK(checkBufferForExecutor(comm, c.sendbuff, "sendbuff", c.func));
    }
    if (receives) {
      CHORUS_CHECK(checkNotNull(c.recvbuff, "recvbuff", c.func));
      CHORUS_CHECK(checkBufferForExecutor(comm, c.recvbuff, "recvbuff", c.func));
    }
    if (sends && receives) CHORUS_CHECK(checkInPlaceForm(c, comm));
  }
  return ncclSuccess;
}

// A refused config fails its own call only: unlike a bad argument it does not fail the
// group the call is in (NCCL 2.31 runs the rest of the group). The plain forms pass no
// config and pay one branch for it.
ncclResult_t submit(const Call& c, ncclComm* comm, cudaStream_t stream, const ncclCollConfig_t* config = nullptr,
                    std::shared_ptr<StagedCopy> staged = nullptr) {
  const CommCall held(comm);
  CallTuning tuning;
  if (config != nullptr) CHORUS_CHECK(readCollConfig(config, collKindOf(c.kind), c.func, &tuning));
  UserRedOp userOp;
  ncclResult_t r = validate(c, held, comm, &userOp);
  if (r != ncclSuccess) {
    groupRecordError(r);
    return r;
  }
  if (config != nullptr) nameUnusedCollConfigFields(comm, config, c.func);
  INFO(kSubsysColl, "%s: sendbuff %p recvbuff %p count %zu datatype %s op %d root %d comm %p [nranks=%d] stream %p",
       c.func, c.sendbuff, static_cast<void*>(c.recvbuff), c.count, typeName(c.dtype), static_cast<int>(c.op), c.root,
       static_cast<void*>(comm), comm->nranks, static_cast<void*>(stream));
  // CHORUS_FAULT: a rule may fail the call here (an abort ended its stall, it broke the communicator).
  if (r = faultAtCall(comm, faultCallOf(c.kind)); r != ncclSuccess) {
    groupRecordError(r);
    return r;
  }
  CollOp op{c.kind, c.sendbuff, c.recvbuff, c.count, c.dtype, c.op, c.root, stream, tuning};
  op.userOp = userOp;
  op.staged = std::move(staged);
  if (config != nullptr) op.profile.userTag = config->userProfilerTag;  // for a profiler plugin's events
  return enqueueOp(comm, op);
}

// Validates a composite call, then records its sends and receives as one group. Its
// config can only be checked: sends and receives have no algorithm or channels to bound.
template <typename Record>
ncclResult_t submitGrouped(const Call& c, FaultCall faultCall, ncclComm* comm, const ncclCollConfig_t* config,
                           Record&& record) {
  const CommCall held(comm);
  CallTuning unused;
  CHORUS_CHECK(readCollConfig(config, CollKind::SendRecv, c.func, &unused));
  ncclResult_t r = validate(c, held, comm);
  if (r != ncclSuccess) {
    groupRecordError(r);
    return r;
  }
  nameUnusedCollConfigFields(comm, config, c.func);
  if (r = faultAtCall(comm, faultCall); r != ncclSuccess) {  // CHORUS_FAULT, as in submit
    groupRecordError(r);
    return r;
  }
  const FaultCompositeCall parts;  // its sends and receives are this one call
  const size_t bytes = c.count * typeSize(c.dtype);
  groupStart();
  for (int peer = 0; peer < comm->nranks && r == ncclSuccess; ++peer) r = record(peer, bytes);
  ncclResult_t end = groupEnd();
  return r != ncclSuccess ? r : end;
}

const char* at(const void* base, size_t offset) { return static_cast<const char*>(base) + offset; }
char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

// The calls, by collective; the entry points below name themselves in `func`.
Call allReduce(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               ncclRedOp_t op) {
  Call c{func, WorkKind::AllReduce, sendbuff, recvbuff, count, datatype, op, 0};
  c.reduces = true;
  return c;
}

Call reduceScatter(const char* func, const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                   ncclRedOp_t op) {
  Call c{func, WorkKind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0};
  c.reduces = true;
  c.sendPerRank = true;
  return c;
}

Call allGather(const char* func, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype) {
  Call c{func, WorkKind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0};
  c.recvPerRank = true;
  return c;
}

Call broadcast(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
               int root) {
  Call c{func, WorkKind::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root};
  c.rooted = true;
  c.sendAtRootOnly = true;
  return c;
}

Call reduce(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
            ncclRedOp_t op, int root) {
  Call c{func, WorkKind::Reduce, sendbuff, recvbuff, count, datatype, op, root};
  c.reduces = true;
  c.rooted = true;
  c.recvAtRootOnly = true;
  return c;
}

Call send(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer) {
  Call c{"ncclSend", WorkKind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer};
  c.rooted = true;
  c.rootName = "peer";
  c.needsRecv = false;
  return c;
}

Call recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer) {
  Call c{"ncclRecv", WorkKind::Recv, nullptr, recvbuff, count, datatype, ncclSum, peer};
  c.rooted = true;
  c.rootName = "peer";
  c.needsSend = false;
  return c;
}

// An AlltoAll whose buffers overlap (in place, or shifted): a block received could overwrite
// one not yet sent, so the sends read a copy of the send data, taken when their launch
// starts (CollOp::staged; NCCL defines no in-place AlltoAll and returns whatever the race
// gives). On one rank only a shifted one: in place its one block goes onto itself. The copy
// is host memory: a GPU communicator refuses the overlap. Null copy: send from sendbuff.
ncclResult_t stagedAlltoAllSource(const Call& c, ncclComm* comm, std::shared_ptr<StagedCopy>* copy) {
  const size_t bytes = c.count * typeSize(c.dtype) * comm->nranks;
  if (c.count == 0 || !buffersOverlap(c.sendbuff, bytes, c.recvbuff, bytes)) return ncclSuccess;
  if (comm->nranks == 1 && c.sendbuff == c.recvbuff) return ncclSuccess;
  if (comm->executorChoice.load() == ExecutorChoice::Cuda) {
    WARN(
        "%s: invalid argument: sendbuff %p and recvbuff %p overlap (%zu bytes each), and AlltoAll has no in-place "
        "form on a GPU communicator (rank %d): a block received would overwrite one not yet sent",
        c.func, c.sendbuff, static_cast<const void*>(c.recvbuff), bytes, comm->rank);
    return ncclInvalidArgument;
  }
  *copy =
      std::make_shared<StagedCopy>(StagedCopy{c.sendbuff, bytes, std::make_unique_for_overwrite<std::byte[]>(bytes)});
  return ncclSuccess;
}

ncclResult_t alltoAll(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  Call c{func, WorkKind::Send, sendbuff, recvbuff, count, datatype, ncclSum, 0};
  c.sendPerRank = true;
  c.recvPerRank = true;
  std::shared_ptr<StagedCopy> copy;
  return submitGrouped(c, FaultCall::AlltoAll, comm, config, [&](int peer, size_t bytes) {
    if (peer == 0) CHORUS_CHECK(groupRecorded(stagedAlltoAllSource(c, comm, &copy)));
    const void* source = copy ? copy->data.get() : sendbuff;
    CHORUS_CHECK(submit(send(at(source, peer * bytes), count, datatype, peer), comm, stream, nullptr, copy));
    return pncclRecv(at(recvbuff, peer * bytes), count, datatype, peer, comm, stream);
  });
}

ncclResult_t gather(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                    int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  Call c{func, WorkKind::Send, sendbuff, recvbuff, count, datatype, ncclSum, root};
  c.rooted = true;
  c.recvAtRootOnly = true;
  c.recvPerRank = true;
  return submitGrouped(c, FaultCall::Gather, comm, config, [&](int peer, size_t bytes) {
    if (peer == root) CHORUS_CHECK(pncclSend(sendbuff, count, datatype, root, comm, stream));
    if (comm->rank == root) return pncclRecv(at(recvbuff, peer * bytes), count, datatype, peer, comm, stream);
    return ncclSuccess;
  });
}

ncclResult_t scatter(const char* func, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                     int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  Call c{func, WorkKind::Send, sendbuff, recvbuff, count, datatype, ncclSum, root};
  c.rooted = true;
  c.sendAtRootOnly = true;
  c.sendPerRank = true;
  return submitGrouped(c, FaultCall::Scatter, comm, config, [&](int peer, size_t bytes) {
    if (comm->rank == root) CHORUS_CHECK(pncclSend(at(sendbuff, peer * bytes), count, datatype, peer, comm, stream));
    if (peer == root) return pncclRecv(recvbuff, count, datatype, root, comm, stream);
    return ncclSuccess;
  });
}

}  // namespace

extern "C" {

ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return submit(allReduce("ncclAllReduce", sendbuff, recvbuff, count, datatype, op), comm, stream);
}

ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(reduceScatter("ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op), comm, stream);
}

ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return submit(allGather("ncclAllGather", sendbuff, recvbuff, sendcount, datatype), comm, stream);
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  return submit(broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root), comm, stream);
}

ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  Call c{"ncclBcast", WorkKind::Broadcast, buff, buff, count, datatype, ncclSum, root};
  c.rooted = true;
  return submit(c, comm, stream);
}

ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(reduce("ncclReduce", sendbuff, recvbuff, count, datatype, op, root), comm, stream);
}

ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return submit(send(sendbuff, count, datatype, peer), comm, stream);
}

ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return submit(recv(recvbuff, count, datatype, peer), comm, stream);
}

ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return alltoAll("ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm, stream, nullptr);
}

ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return gather("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
}

ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  return scatter("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
}

ncclResult_t pncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                  const ncclCollConfig_t* config) {
  return submit(allReduce("ncclAllReduceConfig", sendbuff, recvbuff, count, datatype, op), comm, stream, config);
}

ncclResult_t pncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                      const ncclCollConfig_t* config) {
  return submit(reduceScatter("ncclReduceScatterConfig", sendbuff, recvbuff, recvcount, datatype, op), comm, stream,
                config);
}

ncclResult_t pncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return submit(allGather("ncclAllGatherConfig", sendbuff, recvbuff, sendcount, datatype), comm, stream, config);
}

ncclResult_t pncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return submit(broadcast("ncclBroadcastConfig", sendbuff, recvbuff, count, datatype, root), comm, stream, config);
}

ncclResult_t pncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                               const ncclCollConfig_t* config) {
  return submit(reduce("ncclReduceConfig", sendbuff, recvbuff, count, datatype, op, root), comm, stream, config);
}

ncclResult_t pncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return alltoAll("ncclAlltoAllConfig", sendbuff, recvbuff, count, datatype, comm, stream, config);
}

ncclResult_t pncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return gather("ncclGatherConfig", sendbuff, recvbuff, count, datatype, root, comm, stream, config);
}

ncclResult_t pncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  return scatter("ncclScatterConfig", sendbuff, recvbuff, count, datatype, root, comm, stream, config);
}

ncclResult_t pncclGroupStart() { return groupStart(); }
ncclResult_t pncclGroupEnd() { return groupEnd(); }
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) { return groupSimulateEnd(simInfo); }

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclAllReduce)
CHORUS_EXPORT_ALIAS(ncclReduceScatter)
CHORUS_EXPORT_ALIAS(ncclAllGather)
CHORUS_EXPORT_ALIAS(ncclBroadcast)
CHORUS_EXPORT_ALIAS(ncclBcast)
CHORUS_EXPORT_ALIAS(ncclReduce)
CHORUS_EXPORT_ALIAS(ncclSend)
CHORUS_EXPORT_ALIAS(ncclRecv)
CHORUS_EXPORT_ALIAS(ncclAlltoAll)
CHORUS_EXPORT_ALIAS(ncclGather)
CHORUS_EXPORT_ALIAS(ncclScatter)
CHORUS_EXPORT_ALIAS(ncclAllReduceConfig)
CHORUS_EXPORT_ALIAS(ncclReduceScatterConfig)
CHORUS_EXPORT_ALIAS(ncclAllGatherConfig)
CHORUS_EXPORT_ALIAS(ncclBroadcastConfig)
CHORUS_EXPORT_ALIAS(ncclReduceConfig)
CHORUS_EXPORT_ALIAS(ncclAlltoAllConfig)
CHORUS_EXPORT_ALIAS(ncclGatherConfig)
CHORUS_EXPORT_ALIAS(ncclScatterConfig)
CHORUS_EXPORT_ALIAS(ncclGroupStart)
CHORUS_EXPORT_ALIAS(ncclGroupEnd)
CHORUS_EXPORT_ALIAS(ncclGroupSimulateEnd)
