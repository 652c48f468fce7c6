// The board's memory (device/common/board.h): one POSIX shared memory segment per
// communicator whose ranks all share this host's /dev/shm, one block per rank. Rank 0 makes
// it and every other rank maps it by the name rank 0 announces.
//
// The name carries rank 0's process tag (core/process_liveness.h): if that process dies
// before every rank has mapped the segment, the next Chorus process on this host removes
// it. The last rank to map it removes the name (a count in the segment's header says who
// that is), and rank 0 removes it at the end in any case, so a communicator leaves nothing
// in /dev/shm. Each rank's view of a block is a FifoEnd with its resource (which holds the
// mapping and the block's rank's liveness handle): its own block's end sends, the others'
// receive.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "device/common/step_fifo.h"
#include "transport/transport.h"

namespace chorus {

class BoardSegment;

// Rank 0 (`self`): makes and maps the segment for `nranks` blocks; `*nonce` tells the others
// its name. A failure WARNs and returns an error: the communicator then has no board.
ncclResult_t createBoard(const PeerInfo& self, int nranks, std::shared_ptr<BoardSegment>* segment, uint64_t* nonce);

// Any other rank: maps the segment that `creator` (rank 0) made and named by `nonce`.
ncclResult_t openBoard(const PeerInfo& creator, uint64_t nonce, int nranks, std::shared_ptr<BoardSegment>* segment);

// Rank `self`'s end of rank `peer.rank`'s block (its own block when peer is self).
void attachBoardBlock(const std::shared_ptr<BoardSegment>& segment, const PeerInfo& self, const PeerInfo& peer,
                      FifoEnd* end, std::unique_ptr<ConnectionResource>* resource);

}  // namespace chorus
