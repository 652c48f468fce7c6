// CallStamp: what a call is, carried by every step it sends, so that a receiver whose own
// call differs fails instead of computing with the wrong data (collective fingerprints).
//
// Every work item knows its call's stamp: a sequence number (per communicator for
// collectives, per sender → receiver pair for Send/Recv, counted at the API) and what the
// call is (kind, type, reduction, count, root, algorithm and protocol). Each step carries
// a stamp, the call's stamp plus the step's bytes (and number):
//   Simple on direct FIFOs (P2P, SHM): StepFifoControl::stamps[s % nSlots], written before
//     tail is published, read by the receiver once the step arrived (step_stamps.h);
//   Simple on proxied FIFOs (NET): a trailer right behind the step's payload, 8-byte
//     aligned, sent with it; `sizes` then counts the trailer too;
//   LL and LL128, everywhere: the step's first lines (line_pipeline.h), flags and all.
// The receiver compares the stamp with its own call's (stampsMatch): a Send matches the
// Recv of the same sequence number and bytes; a collective matches only itself. So no
// extra message or round trip is needed, and a mismatch shows at the first step.
// Steps that never come, or slots never freed (a root or count mismatch that leaves a
// receiver or a sender waiting), are caught through the calls each end announces
// (StepFifoControl::sender and ::receiver), which a long wait compares with its own
// (callConflict): on direct FIFOs in shared memory, on proxied ones as the proxies relay
// them (transport/net/net_connection.h: over the net's notes, or a note link beside it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/common/platform.h"

namespace chorus {

struct CallStamp {
  uint64_t seq = 0;       // the call's number (1, 2, ...); 0: unstamped (unit tests)
  uint64_t count = 0;     // as the user passed it (a rank's block for AllGather/ReduceScatter); bytes for Send/Recv
  int32_t root = -1;      // Broadcast and Reduce; -1 otherwise
  uint8_t kind = 0;       // WorkKind
  uint8_t dtype = 0;      // ncclDataType_t; 0 for Send/Recv (bytes are what must agree)
  uint8_t redOp = 0;      // RedKind, for reductions; 0 otherwise
  uint8_t algoProto = 0;  // Algorithm << 4 | Protocol, and kStampOnBoard where the call ran on the board
};
static_assert(sizeof(CallStamp) == 24, "CallStamp travels in FIFOs");

// CallStamp::algoProto's bit for a call on the board (board.h): ranks that disagree on it
// (one on the board, one on the ring) have mismatched calls, as for any other choice.
constexpr uint8_t kStampOnBoard = 8;

struct StepStamp {
  uint64_t step;  // the step it belongs to
  int64_t bytes;  // the step's payload
  CallStamp call;
};
static_assert(sizeof(StepStamp) == 40, "StepStamp travels in FIFOs");
constexpr size_t kStampTrailerBytes = sizeof(StepStamp) + 8;  // with the payload's alignment to 8

// Where one end of a connection is (StepFifoControl::sender and ::receiver): the call it
// last started on the connection, and whether it finished it.
struct PeerCall {
  CallStamp call;
  uint64_t endStep;     // 0 while in the call; once done with it, the end's step counter plus one
  uint64_t generation;  // odd while being rewritten, so a reader can tell a torn copy
};

// Communicators that share ring and tree connections (ncclConfig_t.splitShare and
// shrinkShare, src/comm/shared_connections.h) number their collectives independently, so
// each stamps its own tag into seq's top bits: a step of one is never taken for the
// other's same-numbered call. 0 for every other communicator (and every Send/Recv). 20
// bits of tag (drawn from the communicator's hash: two of one family share a tag with odds
// of one in a million) leave 44 bits of call number, 10^13 calls.
constexpr int kStampTagShift = 44;
constexpr uint64_t kStampNumberMask = (uint64_t{1} << kStampTagShift) - 1;
CHORUS_HD uint64_t callNumber(uint64_t seq) { return seq & kStampNumberMask; }
// Whether two calls come from the same communicator's numbering, so their order says which
// came first (calls of communicators sharing a connection are in no order the numbers show).
CHORUS_HD bool sameNumbering(const CallStamp& a, const CallStamp& b) {
  return (a.seq >> kStampTagShift) == (b.seq >> kStampTagShift);
}

// WorkKind's Send and Recv values (work.h includes this header, not the reverse).
constexpr uint8_t kStampSend = 5;
constexpr uint8_t kStampRecv = 6;

// True when the step stamped `sent` belongs to the call this rank stamped `mine`.
CHORUS_HD bool stampsMatch(const CallStamp& sent, const CallStamp& mine) {
  if (sent.seq != mine.seq || sent.count != mine.count) return false;
  if (mine.kind == kStampRecv) return sent.kind == kStampSend && sent.algoProto == mine.algoProto;
  return sent.kind == mine.kind && sent.dtype == mine.dtype && sent.redOp == mine.redOp && sent.root == mine.root &&
         sent.algoProto == mine.algoProto;
}

// The payload's end rounded up to 8 bytes: where a proxied step's trailer starts.
CHORUS_HD size_t trailerOffset(size_t payloadBytes) { return (payloadBytes + 7) & ~static_cast<size_t>(7); }

}  // namespace chorus
