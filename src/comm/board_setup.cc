#include "src/comm/board_setup.h"

#include <algorithm>

#include "core/debug.h"
#include "core/env.h"
#include "device/common/board.h"
#include "transport/board_memory.h"
#include "transport/transport.h"

namespace chorus {

namespace {

// Every rank wants a board and every rank shares this rank's /dev/shm (SHM's own test).
// Two ranks have none: their ring's pairAllReduce is one hop already, and measured faster.
bool everyRankCanUseBoard(const ncclComm* comm) {
  const PeerInfo& self = comm->peers[comm->rank];
  return comm->nranks > 2 && std::all_of(comm->peers.begin(), comm->peers.end(), [&](const PeerInfo& p) {
           return p.boardWanted != 0 && shmTransport().canConnect(self, p);
         });
}

}  // namespace

bool boardWanted(const PeerInfo& self) {
  return self.gpuComm == 0 && envInt("NCCL_SHM_DISABLE", 0) == 0 && envIntInRange("CHORUS_BOARD", 1, 0, 1) != 0;
}

void offerBoard(ncclComm* comm) {
  PeerInfo& self = comm->peers[comm->rank];
  self.boardNonce = 0;
  if (comm->rank != 0 || !everyRankCanUseBoard(comm)) return;
  // A failure WARNs and names no board: the small calls then run on the ring everywhere.
  if (createBoard(self, comm->nranks, &comm->boardMade, &self.boardNonce) != ncclSuccess) comm->boardMade.reset();
}

ncclResult_t joinBoard(ncclComm* comm) {
  const uint64_t nonce = comm->peers[0].boardNonce;
  std::shared_ptr<BoardSegment> segment = std::move(comm->boardMade);
  if (nonce == 0) return ncclSuccess;
  if (!everyRankCanUseBoard(comm)) {
    WARN("Rank %d: rank 0 made a board, but this rank finds that not every rank can use one", comm->rank);
    return ncclInternalError;
  }
  if (comm->rank != 0) CHORUS_CHECK(openBoard(comm->peers[0], nonce, comm->nranks, &segment));
  comm->board.resize(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) {
    Connection& c = comm->board[r];
    attachBoardBlock(segment, comm->peers[comm->rank], comm->peers[r], &c.end, &c.resource);
    c.transport = &shmTransport();
  }
  INFO(kSubsysInit | kSubsysShm,
       "rank %d: AllReduce calls of up to %zu bytes run on the board where the tuner prices it lower (CHORUS_BOARD)",
       comm->rank, kBoardSlotBytes);
  return ncclSuccess;
}

}  // namespace chorus
