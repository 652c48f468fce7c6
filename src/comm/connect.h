// The two halves of connecting one direction between two ranks, shared by the
// channel connections made at init and the send/recv connections made on first use.
// A receiver is created and its handle sent to the peer before any sender waits for
// its peer's handle, so ranks that connect to each other never wait on one another.
#pragma once

#include <string>

#include "src/comm/comm.h"

namespace chorus {

// What a connection carries, which decides what its transports are told (LinkContext).
enum class ConnectionUse {
  kChannel,   // a collective channel's: its sender attaches in the same set-up, and
              // awaitConnections awaits both ends (LinkContext::setUpTogether)
  kSendRecv,  // Send/Recv's, made on a pair's first call: its sender may attach any time later
  kOneSided,  // one-sided calls' (src/rma): host threads at both ends copy its bytes, so its
              // FIFO is in host memory on a GPU communicator too
};

// Lays out the FIFO for data from `peer` and sends the peer its handle (tag `tag`).
ncclResult_t createReceiverFor(ncclComm* comm, int peer, const FifoLayout& layout, int tag, Connection* conn,
                               ConnectionUse use);

// A wait for a handle that comes when the peer reaches a call (a Send's connection on first
// use: the peer's first Recv from this rank): what it waits for, and whether it timed out.
struct CallWait {
  std::string what;
  bool timedOut = false;
};

// Waits for `peer`'s handle (tag `tag`) and attaches to its receiver, made for the same
// use. With `forCall` the wait is the call's (CHORUS_TIMEOUT), and forCall says what it
// waits for and how it ended.
ncclResult_t attachSenderTo(ncclComm* comm, int peer, int tag, Connection* conn, ConnectionUse use,
                            CallWait* forCall = nullptr);

// splitShare (src/comm/shared_connections.h), a channel's two halves where this rank's
// end borrows `lent`, a connection of the communicator it was made from: the receiver
// tells the peer it borrowed; the sender checks that the peer's receiver did the same.
ncclResult_t borrowReceiver(ncclComm* comm, int peer, int tag, Connection& lent, Connection* conn);
ncclResult_t borrowSender(ncclComm* comm, int peer, int tag, Connection& lent, Connection* conn);

// Waits until every connection of the communicator can carry data (NET connections are
// completed by the proxy thread after both halves above have run).
ncclResult_t awaitConnections(ncclComm* comm);

}  // namespace chorus
