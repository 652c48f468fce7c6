// Communicators made from another (ncclCommSplit, ncclCommShrink, ncclCommGrow): the collective part,
// over the parent's bootstrap, that tells each rank where it lands and how to join.
//
// Split: every rank of the parent all-gathers its color and key; the members of each
// color are ordered by key, then by parent rank (as NCCL); each new communicator's rank 0
// starts a fresh bootstrap root, and a second all-gather hands every member its id.
// Shrink: the survivors know the new order without asking (the parent's, gaps closed);
// the new rank 0 starts a root and sends its id to each survivor, so the excluded ranks,
// dead or alive, take no part. Grow: the existing ranks learn the id one of them made
// (ncclCommGetUniqueId) and keep their ranks; the new ranks join with that id as
// ncclCommInitRank does. The new communicators are then set up as ncclCommInitRank
// would (initCommunicator).
#pragma once

#include <vector>

#include "nccl.h"

struct ncclComm;

namespace chorus {

struct SplitEntry {
  int color;  // >= 0, or NCCL_SPLIT_NOCOLOR
  int key;
};

// The parent ranks of color `color`, in their new rank order.
std::vector<int> splitMembers(const std::vector<SplitEntry>& entries, int color);

// Where a rank lands: rank and size of its new communicator and the id to join it by
// (rank -1 for NCCL_SPLIT_NOCOLOR).
struct SplitPlacement {
  int rank = -1;
  int nranks = 0;
  ncclUniqueId id{};
  std::vector<int> members;  // split and shrink: the new communicator's ranks in the parent, in its order
};

// The exchange over `parent`'s bootstrap; every rank of the parent must take part. An
// error on one rank (its root could not start) fails every rank with a WARN naming it.
ncclResult_t exchangeSplit(ncclComm* parent, int color, int key, SplitPlacement* out);

// The shrink's exchange among the parent ranks not in `excluded` (checked: in range, no
// duplicates, not this rank); `sequence` tells apart the shrinks of one parent.
ncclResult_t exchangeShrink(ncclComm* parent, const std::vector<int>& excluded, int sequence, SplitPlacement* out);

// Grow's exchange among the parent's ranks: the id of the grown communicator, passed by the
// rank that made it (ncclCommGetUniqueId; the others pass NULL), reaches all; every rank
// keeps its rank in the `nranks` of the grown communicator. Ranks that disagree on the id
// or on `nranks`, or that all passed NULL, fail with a WARN naming them.
ncclResult_t exchangeGrow(ncclComm* parent, const ncclUniqueId* id, int nranks, SplitPlacement* out);

}  // namespace chorus
