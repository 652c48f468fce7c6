// Hands file descriptors to other processes of this host (CUDA IPC's cuMem handles, as
// NCCL passes them) over a Unix socket in the abstract namespace, served by one thread per
// process. The owner offers a descriptor and gets a ticket: the socket's name and a random
// 128-bit token, which it sends to the one peer meant to have it over an authenticated
// channel (the bootstrap). The peer redeems the ticket once and receives a duplicate of the
// descriptor (SCM_RIGHTS). The token is the capability: a process that does not hold it
// gets nothing, a malformed or slow request is dropped after a second, and nothing a
// client sends decides what the server allocates.
#pragma once

#include <cstdint>

#include "nccl.h"

namespace chorus {

struct FdTicket {
  char socketName[40];  // the abstract socket's name, without the leading NUL; NUL-terminated
  uint8_t token[16];
};

// Offers a duplicate of `fd` (the caller keeps its own) until it is redeemed or withdrawn.
// Starts the process's server on first use. Errors (a WARN names the syscall and errno):
// ncclSystemError.
ncclResult_t offerFd(int fd, FdTicket* ticket);

// Takes back an offer not yet redeemed (nothing if it was).
void withdrawFd(const FdTicket& ticket);

// The server's answer on the wire: one status byte (1: here it is), with `fd` attached
// (SCM_RIGHTS) where it is >= 0; the caller keeps its `fd`. Tests' stand-in servers answer
// with it too.
void sendFdAnswer(int socket, char status, int fd);

// Redeems `ticket` from the process that offered it, waiting at most `timeoutSec`: `*fd`
// is this process's descriptor, the caller's to close. A server that is gone (its process
// died), a ticket it does not hold, or a timeout: ncclRemoteError or ncclSystemError, with
// a WARN naming `peerRank` and the cause.
ncclResult_t redeemFd(const FdTicket& ticket, int peerRank, double timeoutSec, int* fd);

}  // namespace chorus
