#include "src/comm/connect.h"

#include "core/debug.h"

namespace chorus {

ncclResult_t createReceiverFor(ncclComm* comm, int peer, const FifoLayout& layout, int tag, Connection* conn) {
  const PeerInfo& self = comm->peers[comm->rank];
  const Transport* t = selectTransport(self, comm->peers[peer]);
  if (!t) return ncclSystemError;
  ConnectHandle handle;
  CHORUS_CHECK(t->createReceiver(layout, self, comm->peers[peer], &handle, &conn->end, &conn->resource));
  conn->transport = t;
  return comm->bootstrap->send(peer, tag, &handle, sizeof(handle));
}

ncclResult_t attachSenderTo(ncclComm* comm, int peer, int tag, Connection* conn) {
  ConnectHandle handle;
  CHORUS_CHECK(comm->bootstrap->recv(peer, tag, &handle, sizeof(handle)));
  const Transport* t = transportById(handle.transport);
  if (!t) {
    WARN("Rank %d: peer rank %d answered with unknown transport %u", comm->rank, peer,
         static_cast<unsigned>(handle.transport));
    return ncclInternalError;
  }
  CHORUS_CHECK(t->attachSender(handle, comm->peers[comm->rank], comm->peers[peer], &conn->end, &conn->resource));
  conn->transport = t;
  return ncclSuccess;
}

ncclResult_t awaitConnections(ncclComm* comm) {
  // A revoke while waiting ends the wait; after a revoke (the connections of a shrink's
  // exchange) only an abort does.
  const std::atomic<uint32_t>* revoke = comm->revokeFlag.load() == 0 ? &comm->revokeFlag : nullptr;
  ncclResult_t result = ncclSuccess;
  comm->forEachConnection([&](Connection& c) {
    if (result == ncclSuccess && c.resource) result = c.resource->awaitReady(&comm->abortFlag, revoke);
  });
  return result;
}

}  // namespace chorus
