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
//  - One family member's collectives at a time on a rank, in the order they were handed
//    over: at a group's end every launch it hands over (its blocking communicators' on this
//    thread, each non-blocking one's on its worker) takes a ticket from each family it runs
//    a member of, all at once (RunTurns::queueTogether), and waits for its turn before it
//    runs, as NCCL's shared stream orders them. Members in one group go in their tags'
//    order, the same on every rank whatever order the calls were made in: a launch of
//    blocking communicators runs them in rounds (RunTurns::rounds), non-blocking ones'
//    launches take their tickets in that order. Send/Recv move over each communicator's
//    own connections and take no turn.
//  - Calls are told apart: each member that borrows stamps its collectives with its own tag
//    (ncclComm::stampTag, call_stamp.h), so members run in a different order on two ranks
//    fail with a WARN instead of reducing each other's data.
//  - A lent connection outlives its owner: a destroyed member's channels are kept here
//    while another member still borrows from them, and freed once none does.
//  - A failure or abort of a member marks the connections it used broken, borrowed ones
//    too, so a peer waiting on them fails at once (NCCL's members share an abort flag); a
//    parent whose connections among the new communicator's ranks are broken lends none.
//  - Limits: with CHORUS_FINGERPRINTS=0 steps carry no stamp, so nothing tells members'
//    calls apart; a WARN about a borrowed connection names the peer by its rank in the
//    communicator that made it.
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

  // Whether `lender`'s channel connections between `members` (its ranks) may be lent: none
  // of them broken (a failed or aborted communicator sharing them broke them, or a peer
  // gave up). Where not, this rank does not ask to share, and so no rank shares.
  static bool lendable(const ncclComm* lender, std::span<const int> members);
  // Lends `lender`'s connection (the one it uses) to `borrower`, which uses it from now on.
  void lend(Connection& lender, Connection* borrower);
  // Whether another member uses `c` now.
  bool lent(const Connection& c);
  // At a member's destroy: gives back what its channels borrowed, and keeps the channels
  // (moved here) if another member still uses one of their connections; kept channels no
  // member uses any more are marked destroyed (for the peers) and freed.
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
  bool anyBorrowed(std::vector<Channel>& channels);  // mutex_ held

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

  // One launch's communicators and the turns it takes for them.
  struct Launch {
    RunTurns* turns;
    std::vector<ncclComm*> comms;
  };
  // Takes every launch's tickets at once (so two groups' launches are in the same order in
  // every family they share, and never wait on each other); a group's launches in the order
  // of their members' tags, which every rank has alike, not the order of its calls.
  static void queueTogether(std::vector<Launch>& launches);
  // Whether two of `comms` (one launch's) share connections; then it runs in rounds: each
  // with at most one member of each family, members in their tags' order, the others in
  // the first.
  static bool anyFamilyTwice(std::span<ncclComm* const> comms);
  static std::vector<std::vector<ncclComm*>> rounds(std::span<ncclComm* const> comms);
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
