#include "src/comm/connect.h"

#include <cstring>

#include "core/debug.h"
#include "src/comm/shared_connections.h"

namespace chorus {

namespace {

// What the transports are told of the pair beyond the peers' information: a GPU
// communicator's GPU memory and the path between the two GPUs (none for one-sided
// connections: host memory), and whether both ends are set up together.
LinkContext linkTo(const ncclComm* comm, int peer, ConnectionUse use) {
  LinkContext link = comm->gpuLinks.empty() || use == ConnectionUse::kOneSided ? LinkContext{} : comm->gpuLinks[peer];
  link.setUpTogether = use == ConnectionUse::kChannel;
  return link;
}

}  // namespace

ncclResult_t createReceiverFor(ncclComm* comm, int peer, const FifoLayout& layout, int tag, Connection* conn,
                               ConnectionUse use) {
  const PeerInfo& self = comm->peers[comm->rank];
  const Transport* t = selectTransport(self, comm->peers[peer]);
  ConnectHandle handle;
  memset(static_cast<void*>(&handle), 0, sizeof(handle));  // padding too: the handle crosses the network
  const LinkContext link = linkTo(comm, peer, use);
  const ncclResult_t made =
      t == nullptr ? ncclSystemError
                   : t->createReceiver(layout, self, comm->peers[peer], link, &handle, &conn->end, &conn->resource);
  if (made != ncclSuccess) {
    // The peer waits for this handle: a failed one (no transport) tells it at once, instead
    // of leaving it to the bootstrap's timeout.
    memset(static_cast<void*>(&handle), 0, sizeof(handle));
    comm->bootstrap->send(peer, tag, &handle, sizeof(handle));
    return made;
  }
  conn->transport = t;
  return comm->bootstrap->send(peer, tag, &handle, sizeof(handle));
}

ncclResult_t attachSenderTo(ncclComm* comm, int peer, int tag, Connection* conn, ConnectionUse use, CallWait* forCall) {
  ConnectHandle handle;
  CHORUS_CHECK(forCall != nullptr ? comm->bootstrap->recvForCall(peer, tag, &handle, sizeof(handle), comm->timeoutSec,
                                                                 forCall->what, &forCall->timedOut)
                                  : comm->bootstrap->recv(peer, tag, &handle, sizeof(handle)));
  if (handle.borrowed != 0) {
    WARN(
        "Rank %d: peer rank %d uses a connection of the communicator both were made from (splitShare) where this "
        "rank has none to share: their parents' channels differ",
        comm->rank, peer);
    return ncclInternalError;
  }
  if (static_cast<uint32_t>(handle.transport) == 0) {
    WARN("Rank %d: peer rank %d could not set up its end of the connection from this rank (its WARN says why)",
         comm->rank, peer);
    return ncclRemoteError;
  }
  if (!handle.layout.plausible()) {
    WARN(
        "Rank %d: peer rank %d announced a FIFO of %d slots of %zu/%zu/%zu bytes (LL/LL128/Simple), which no rank "
        "makes (NCCL_STEPS a power of two up to %d, whole lines, at most %zu bytes a slot, not all empty)",
        comm->rank, peer, handle.layout.nSlots, handle.layout.slotBytes[0], handle.layout.slotBytes[1],
        handle.layout.slotBytes[2], kMaxSteps, kMaxSlotBytes);
    return ncclRemoteError;
  }
  const Transport* t = transportById(handle.transport);
  if (!t) {
    WARN("Rank %d: peer rank %d answered with unknown transport %u", comm->rank, peer,
         static_cast<unsigned>(handle.transport));
    return ncclInternalError;
  }
  CHORUS_CHECK(t->attachSender(handle, comm->peers[comm->rank], comm->peers[peer], linkTo(comm, peer, use), &conn->end,
                               &conn->resource));
  conn->transport = t;
  return ncclSuccess;
}

ncclResult_t borrowReceiver(ncclComm* comm, int peer, int tag, Connection& lent, Connection* conn) {
  comm->sharedConns->lend(lent, conn);
  ConnectHandle handle;
  memset(static_cast<void*>(&handle), 0, sizeof(handle));
  handle.borrowed = 1;
  return comm->bootstrap->send(peer, tag, &handle, sizeof(handle));
}

ncclResult_t borrowSender(ncclComm* comm, int peer, int tag, Connection& lent, Connection* conn) {
  ConnectHandle handle;
  CHORUS_CHECK(comm->bootstrap->recv(peer, tag, &handle, sizeof(handle)));
  if (handle.borrowed == 0) {
    WARN(
        "Rank %d: peer rank %d made a new connection from this rank where this rank shares one of the communicator "
        "both were made from (splitShare): their parents' channels differ",
        comm->rank, peer);
    return ncclInternalError;
  }
  comm->sharedConns->lend(lent, conn);
  return ncclSuccess;
}

ncclResult_t awaitConnections(ncclComm* comm) {
  // A revoke while waiting ends the wait; after a revoke (the connections of a shrink's
  // exchange) only an abort does.
  const std::atomic<uint32_t>* revoke = comm->revokeFlag.load() == 0 ? &comm->revokeFlag : nullptr;
  ncclResult_t result = ncclSuccess;
  comm->forEachConnection([&](Connection& c) {
    if (result == ncclSuccess && c.resource) result = c.resource->awaitReady(&c.end, &comm->abortFlag, revoke);
  });
  return result;
}

}  // namespace chorus
