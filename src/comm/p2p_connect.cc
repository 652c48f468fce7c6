#include <set>
#include <string>

#include "core/debug.h"
#include "src/comm/comm.h"
#include "src/comm/connect.h"
#include "src/report/hang_report.h"

namespace chorus {
namespace {

constexpr int kP2pTag = 0x2000;

struct PeerNeeds {
  std::set<int> recvFrom;
  std::set<int> sendTo;
};

bool needsConnection(const ncclComm* comm, const CollOp& op) {
  if (op.root == comm->rank) return false;  // to self: a local copy, no connection
  if (op.kind == WorkKind::Recv) return !comm->p2pRecv[op.root].connected();
  if (op.kind == WorkKind::Send) return !comm->p2pSend[op.root].connected();
  return false;
}

PeerNeeds unconnectedPeers(const ncclComm* comm) {
  PeerNeeds needs;
  for (const CollOp& op : comm->running) {
    if (!needsConnection(comm, op)) continue;
    (op.kind == WorkKind::Recv ? needs.recvFrom : needs.sendTo).insert(op.root);
  }
  return needs;
}

}  // namespace

ncclResult_t connectPendingPeers(const std::vector<ncclComm*>& comms) {
  bool any = false;
  for (const ncclComm* comm : comms)
    for (const CollOp& op : comm->running) any = any || needsConnection(comm, op);
  if (!any) return ncclSuccess;  // the usual case: every peer of these calls is connected
  std::vector<PeerNeeds> needs;
  for (ncclComm* comm : comms) needs.push_back(unconnectedPeers(comm));
  // Phase 1: every receiver of every communicator, handles sent upstream.
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i];
    for (int peer : needs[i].recvFrom)
      CHORUS_CHECK(
          createReceiverFor(comm, peer, comm->p2pLayout, kP2pTag, &comm->p2pRecv[peer], ConnectionUse::kSendRecv));
  }
  // Phase 2: senders attach; their peers' handles are already on the way.
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i];
    for (int peer : needs[i].sendTo) {
      // The peer sends its receiver's handle when it reaches its first Recv from this rank.
      CallWait call{"rank " + std::to_string(peer) + "'s first Recv from rank " + std::to_string(comm->rank) +
                    ", which makes their connection"};
      const ncclResult_t attached =
          attachSenderTo(comm, peer, kP2pTag, &comm->p2pSend[peer], ConnectionUse::kSendRecv, &call);
      if (call.timedOut) {
        writeHangReport(*comm, "a call timed out (CHORUS_TIMEOUT)",
                        "Send to rank " + std::to_string(peer) + " waits for " + call.what);
      }
      CHORUS_CHECK(attached);
      INFO(kSubsysP2p, "Channel 00/1 : %d[%d] -> %d[%d] via %s (p2p)", comm->rank, comm->cudaDev, peer,
           comm->peers[peer].cudaDev, comm->p2pSend[peer].transport->name());
    }
    if (!needs[i].recvFrom.empty() || !needs[i].sendTo.empty()) comm->refreshView();
  }
  // Only the send ends are awaited: each connects to a receiver already listening. A receive
  // end is complete once its sender has made its first Send, which may come any time later
  // (a pipeline's later stage): the Recv's own wait for data, under CHORUS_TIMEOUT and with
  // the hang report, covers a sender that is late or never comes.
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i];
    // After a revoke (a shrink's exchange) only an abort ends the wait, as in awaitConnections.
    const std::atomic<uint32_t>* revoke = comm->revokeFlag.load() == 0 ? &comm->revokeFlag : nullptr;
    for (int peer : needs[i].sendTo) {
      Connection& conn = comm->p2pSend[peer];
      CHORUS_CHECK(conn.resource->awaitReady(&conn.end, &comm->abortFlag, revoke));
    }
  }
  return ncclSuccess;
}

}  // namespace chorus
