#include "src/comm/derived_comm.h"

#include <algorithm>
#include <cstring>

#include "core/debug.h"
#include "src/bootstrap/bootstrap.h"
#include "src/comm/comm.h"

namespace chorus {
namespace {

// Bootstrap tags of a shrink's id message, above the connection handles' (init's and
// p2p_connect's).
constexpr int kShrinkTagBase = 0x3000;

// The second all-gather's slot: a new communicator's id, from its rank 0.
struct RootSlot {
  ncclUniqueId id;
  int32_t result;  // ncclSuccess, or why this rank's root did not start
  int32_t pad;
};

}  // namespace

std::vector<int> splitMembers(const std::vector<SplitEntry>& entries, int color) {
  std::vector<int> members;
  for (int r = 0; r < static_cast<int>(entries.size()); ++r)
    if (entries[r].color == color) members.push_back(r);
  // Stable: equal keys keep the parent's rank order.
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return entries[a].key < entries[b].key; });
  return members;
}

ncclResult_t exchangeSplit(ncclComm* parent, int color, int key, SplitPlacement* out) {
  *out = SplitPlacement{};
  std::vector<SplitEntry> entries(parent->nranks);
  entries[parent->rank] = SplitEntry{color, key};
  CHORUS_CHECK(parent->bootstrap->allGather(entries.data(), sizeof(SplitEntry)));

  const std::vector<int> members = color == NCCL_SPLIT_NOCOLOR ? std::vector<int>{} : splitMembers(entries, color);
  std::vector<RootSlot> roots(parent->nranks, RootSlot{});
  if (!members.empty() && members.front() == parent->rank) {
    // A root of its own, whatever NCCL_COMM_ID says: that address is the parent's.
    roots[parent->rank].result = bootstrapGetUniqueId(&roots[parent->rank].id, RootPlacement::kFresh);
  }
  // Every rank takes part even when its root failed, so the others learn why.
  CHORUS_CHECK(parent->bootstrap->allGather(roots.data(), sizeof(RootSlot)));
  for (int r = 0; r < parent->nranks; ++r) {
    if (roots[r].result != ncclSuccess) {
      WARN("ncclCommSplit: rank %d of the parent could not start the bootstrap root of color %d (%s)", r,
           entries[r].color, ncclGetErrorString(static_cast<ncclResult_t>(roots[r].result)));
      return static_cast<ncclResult_t>(roots[r].result);
    }
  }
  if (members.empty()) return ncclSuccess;
  out->rank = static_cast<int>(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  out->nranks = static_cast<int>(members.size());
  out->id = roots[members.front()].id;
  out->members = members;
  INFO(kSubsysInit, "ncclCommSplit: comm %p rank %d color %d key %d -> rank %d of %d", static_cast<void*>(parent),
       parent->rank, color, key, out->rank, out->nranks);
  return ncclSuccess;
}

ncclResult_t exchangeShrink(ncclComm* parent, const std::vector<int>& excluded, int sequence, SplitPlacement* out) {
  *out = SplitPlacement{};
  std::vector<int> survivors;
  for (int r = 0; r < parent->nranks; ++r)
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) survivors.push_back(r);
  out->rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), parent->rank) - survivors.begin());
  out->nranks = static_cast<int>(survivors.size());
  out->members = survivors;
  const int tag = kShrinkTagBase + sequence;
  const int root = survivors.front();
  if (parent->rank == root) {
    CHORUS_CHECK(bootstrapGetUniqueId(&out->id, RootPlacement::kFresh));
    for (int r : survivors) {
      if (r == root) continue;
      const ncclResult_t sent = parent->bootstrap->send(r, tag, &out->id, sizeof(out->id));
      if (sent != ncclSuccess) {
        WARN("ncclCommShrink: rank %d could not send the new communicator's id to surviving rank %d (%s)", parent->rank,
             r, ncclGetErrorString(sent));
        return sent;
      }
    }
  } else {
    const ncclResult_t got = parent->bootstrap->recv(root, tag, &out->id, sizeof(out->id));
    if (got != ncclSuccess) {
      WARN("ncclCommShrink: rank %d did not get the new communicator's id from rank %d, its new rank 0 (%s)",
           parent->rank, root, ncclGetErrorString(got));
      return got;
    }
  }
  INFO(kSubsysInit, "ncclCommShrink: comm %p rank %d -> rank %d of %d (%zu excluded)", static_cast<void*>(parent),
       parent->rank, out->rank, out->nranks, excluded.size());
  return ncclSuccess;
}

ncclResult_t exchangeGrow(ncclComm* parent, const ncclUniqueId* id, int nranks, SplitPlacement* out) {
  *out = SplitPlacement{};
  struct GrowSlot {
    int hasId;
    int nranks;
    ncclUniqueId id;
  };
  std::vector<GrowSlot> slots(parent->nranks, GrowSlot{});
  slots[parent->rank] = GrowSlot{id != nullptr, nranks, id ? *id : ncclUniqueId{}};
  CHORUS_CHECK(parent->bootstrap->allGather(slots.data(), sizeof(GrowSlot)));
  int giver = -1;
  for (int r = 0; r < parent->nranks; ++r) {
    if (slots[r].nranks != nranks) {
      WARN("ncclCommGrow: rank %d grows to %d ranks, rank %d to %d: every existing rank must pass the same nRanks",
           parent->rank, nranks, r, slots[r].nranks);
      return ncclInvalidArgument;
    }
    if (!slots[r].hasId) continue;
    if (giver >= 0 && memcmp(&slots[r].id, &slots[giver].id, sizeof(ncclUniqueId)) != 0) {
      WARN(
          "ncclCommGrow: ranks %d and %d passed different ids (only the rank that called ncclCommGetUniqueId "
          "passes one; the others pass NULL)",
          giver, r);
      return ncclInvalidArgument;
    }
    if (giver < 0) giver = r;
  }
  if (giver < 0) {
    WARN("ncclCommGrow: no existing rank passed the id (the rank that called ncclCommGetUniqueId passes it)");
    return ncclInvalidArgument;
  }
  *out = SplitPlacement{parent->rank, nranks, slots[giver].id, {}};
  INFO(kSubsysInit, "ncclCommGrow: comm %p rank %d of %d -> rank %d of %d", static_cast<void*>(parent), parent->rank,
       parent->nranks, out->rank, out->nranks);
  return ncclSuccess;
}

}  // namespace chorus
