#include <set>

#include "comm/comm.h"
#include "core/debug.h"

namespace chorus {
namespace {

constexpr int kP2pTag = 0x2000;

struct PeerNeeds {
  std::set<int> recvFrom;
  std::set<int> sendTo;
};

PeerNeeds unconnectedPeers(const ncclComm* comm) {
  PeerNeeds needs;
  for (const CollOp& op : comm->pending) {
    if (op.root == comm->rank) continue;  // to self: a local copy, no connection
    if (op.kind == WorkKind::Recv && !comm->p2pRecv[op.root].connected()) needs.recvFrom.insert(op.root);
    if (op.kind == WorkKind::Send && !comm->p2pSend[op.root].connected()) needs.sendTo.insert(op.root);
  }
  return needs;
}

}  // namespace

ncclResult_t connectPendingPeers(const std::vector<ncclComm*>& comms) {
  std::vector<PeerNeeds> needs;
  for (ncclComm* comm : comms) needs.push_back(unconnectedPeers(comm));
  // Phase 1: every receiver of every communicator, handles sent upstream.
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i];
    const PeerInfo& self = comm->peers[comm->rank];
    for (int peer : needs[i].recvFrom) {
      const Transport* t = selectTransport(self, comm->peers[peer]);
      if (!t) return ncclSystemError;
      ConnectHandle handle;
      Connection& conn = comm->p2pRecv[peer];
      CHORUS_CHECK(t->createReceiver(comm->p2pLayout, self, comm->peers[peer], &handle, &conn.end, &conn.resource));
      conn.transport = t;
      CHORUS_CHECK(comm->bootstrap->send(peer, kP2pTag, &handle, sizeof(handle)));
    }
  }
  // Phase 2: senders attach; their peers' handles are already on the way.
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclComm* comm = comms[i];
    const PeerInfo& self = comm->peers[comm->rank];
    for (int peer : needs[i].sendTo) {
      ConnectHandle handle;
      CHORUS_CHECK(comm->bootstrap->recv(peer, kP2pTag, &handle, sizeof(handle)));
      const Transport* t = transportById(handle.transport);
      if (!t) {
        WARN("Rank %d: peer rank %d answered with unknown transport %u", comm->rank, peer,
             static_cast<unsigned>(handle.transport));
        return ncclInternalError;
      }
      Connection& conn = comm->p2pSend[peer];
      CHORUS_CHECK(t->attachSender(handle, self, comm->peers[peer], &conn.end, &conn.resource));
      conn.transport = t;
      INFO(kSubsysP2p, "Channel 00/1 : %d[%d] -> %d[%d] via %s (p2p)", comm->rank, comm->cudaDev, peer,
           comm->peers[peer].cudaDev, t->name());
    }
    comm->refreshView();
  }
  return ncclSuccess;
}

}  // namespace chorus
