// splitShare and shrinkShare (NCCL's shared resources): a communicator split or shrunk from
// another runs its collectives over that one's ring and tree connections wherever both of
// its ends already have one on the same channel, instead of laying out FIFOs of its own.
// The communicators made this way, and the one they were made from, are a family that
// shares one SharedConnections. The rules that keep it safe:
//  - Both ends decide alike. A rank borrows the connection to (from) a peer on channel c
//    where its parent has one to (from) that peer on channel c (ring and tree neighbours
//    are symmetric, so the peer's parent has the other end); the receiver's handle says
//    whether it borrowed and the sender refuses to go on if it decided otherwise
//    (connect.h). Where sharing is asked for, every rank of the new communicator must ask.
//  - One family member's work at a time on a rank, in the order it was handed over: a
//    launch takes a ticket from each family it runs a member of when its calls are handed
//    to the thread that runs them (RunTurns::queue: at once for a blocking communicator,
//    at the group's end for a non-blocking one's worker) and waits for its turn before it
//    runs, as NCCL's shared stream orders them. One launch holding calls of two members is
//    refused: their steps would interleave on the shared FIFOs.
//  - Calls are told apart: each member that borrows stamps its collectives with its own tag
//    (ncclComm::stampTag, call_stamp.h), so members run in a different order on two ranks
//    fail with a WARN instead of reducing each other's data.
//  - A lent connection outlives its owner: a destroyed member's channels are kept here
//    while another member still borrows from them, and freed with the family.
//  - A failure or abort of a member breaks the connections it used, borrowed ones too: the
//    members sharing them fail with it, as NCCL's share an abort flag.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "src/comm/comm.h"

namespace chorus {

class SharedConnections {
 public:
  ~SharedConnections();  // marks the kept FIFOs destroyed (for the peers) and frees them

  // At a split or shrink that asks to share, on the thread making the call: the parent's
  // family, made now if it has none, so that every later call of the parent takes turns
  // (its calls handed over before then run before the new communicator can run anything).
  static void offer(ncclComm* parent);
  // `child`, being set up from `parent`, joins the family the parent offered.
  static void join(ncclComm* child, ncclComm* parent) { child->sharedConns = parent->sharedConns; }

  // Lends `lender`'s connection (the one it uses) to `borrower`, which uses it from now on.
  void lend(Connection& lender, Connection* borrower);
  // Whether another member uses `c` now.
  bool lent(const Connection& c);
  // At a member's destroy: gives back what its channels borrowed, and keeps the channels
  // (moved here) if another member still uses one of their connections.
  void leave(std::vector<Channel>& channels);

  // Turns: tickets in the order launches were handed over; turn `t` comes once every
  // earlier ticket has ended (run or dropped).
  uint64_t takeTicket();
  // Waits (abort, revoke and CHORUS_TIMEOUT end it) until `ticket`'s turn has come.
  ncclResult_t awaitTurn(uint64_t ticket, ncclComm* comm);
  void endTurn(uint64_t ticket);

 private:
  std::mutex mutex_;
  std::condition_variable turnEnded_;
  uint64_t nextTicket_ = 0;
  uint64_t serving_ = 0;
  std::set<uint64_t> endedEarly_;  // tickets dropped before their turn
  std::unordered_map<const Connection*, int> borrowers_;
  std::vector<std::vector<Channel>> kept_;
};

// The turns of one launch: a ticket from each family it runs a member of, ended (run or
// not) when this goes.
class RunTurns {
 public:
  RunTurns() = default;
  RunTurns(const RunTurns&) = delete;
  RunTurns& operator=(const RunTurns&) = delete;
  ~RunTurns();
  // Takes the tickets, for all families at once (so two launches are in the same order in
  // every family they share, and never wait on each other). ncclInvalidUsage with a WARN
  // when two of `comms` share connections.
  ncclResult_t queue(std::span<ncclComm* const> comms);
  // Waits for every turn taken (or the error that ended a wait).
  ncclResult_t await();
  // Ends every turn taken (run or not): the next launch of each family may go.
  void end();

 private:
  struct Place {
    std::shared_ptr<SharedConnections> family;
    ncclComm* comm;
    uint64_t ticket;
  };
  std::vector<Place> places_;
};

}  // namespace chorus
