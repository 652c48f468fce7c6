// Setting up a communicator's board (device/common/board.h) during its set-up
// (src/comm/init.cc): every rank must end with one, or none.
//
// Each rank says in its first PeerInfo whether it would use one (boardWanted: a CPU
// communicator, NCCL_SHM_DISABLE unset, CHORUS_BOARD not 0). Where every rank does and all
// share this host's /dev/shm, rank 0 makes the board between the two exchanges and names
// it in its second PeerInfo (boardNonce); rank 0 failing to make it names none, and no
// rank has a board. After the second exchange every other rank maps it: a rank that cannot
// fails its set-up (its peers would wait on its block otherwise).
#pragma once

#include "src/comm/comm.h"

namespace chorus {

// Whether the rank `self` describes would use a board (PeerInfo::boardWanted).
bool boardWanted(const PeerInfo& self);

// After the first exchange: rank 0 makes the board where every rank can use it, and sets
// its boardNonce for the second exchange.
void offerBoard(ncclComm* comm);

// After the second exchange: attaches this rank to the board rank 0 named, if any.
ncclResult_t joinBoard(ncclComm* comm);

}  // namespace chorus
