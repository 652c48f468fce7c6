// CHORUS_FAULT: faults injected on purpose, so that users can test their elastic and
// fault-tolerant training code without GPUs or a cluster. A rank is killed, stalled or
// delayed, or its connections are broken, at a chosen call:
//
//   CHORUS_FAULT="rank3:kill@AllReduce#100, rank1:stall@#20; rank0:delay=50ms@Send"
//
//   faults := rule { ("," | ";") rule }        empty rules and blanks around rules are ignored
//   rule   := "rank" R ":" action "@" call
//   action := "kill" | "stall" | "delay=" N unit | "break"
//   unit   := "us" | "ms" | "s"
//   call   := Kind "#" N | "#" N | Kind
//
// R is the rank in the communicator (every communicator where this process has rank R);
// Kind is an NCCL call without its "nccl" prefix (AllReduce, Broadcast or Bcast, Reduce,
// AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv; any case; the nccl*Config
// forms count as their plain call). "Kind#N" is the N-th call of that kind (1-based) on the
// communicator, "#N" its N-th call of any kind, "Kind" every call of that kind. Counted are
// the calls that passed their argument checks; a composite call (AlltoAll, Gather, Scatter)
// is one call, not its sends and receives; one-sided calls are not counted.
//
// The variable is read at each communicator's first call; a malformed rule gets a WARN
// (once per process and value) naming it and is ignored; the others still apply. README.md's
// "Injecting faults" says what each action does and what the peers see.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "device/common/work.h"
#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {

// The calls a rule can name (their order is the order of faultCallName's table).
enum class FaultCall : uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv
};
inline constexpr int kFaultCalls = 10;
const char* faultCallName(FaultCall call);

// The call a submitted op of `kind` is (ncclBcast is a Broadcast). LocalCopy is never
// submitted by a user's call.
constexpr FaultCall faultCallOf(WorkKind kind) {
  switch (kind) {
    case WorkKind::ReduceScatter:
      return FaultCall::ReduceScatter;
    case WorkKind::AllGather:
      return FaultCall::AllGather;
    case WorkKind::Broadcast:
      return FaultCall::Broadcast;
    case WorkKind::Reduce:
      return FaultCall::Reduce;
    case WorkKind::Send:
      return FaultCall::Send;
    case WorkKind::Recv:
      return FaultCall::Recv;
    default:
      return FaultCall::AllReduce;
  }
}

enum class FaultAction : uint8_t { Kill, Stall, Delay, Break };

struct FaultRule {
  int rank = 0;
  FaultAction action = FaultAction::Kill;
  uint64_t delayUs = 0;  // Delay
  bool anyCall = false;  // "#N": counts calls of every kind
  FaultCall call = FaultCall::AllReduce;
  uint64_t nth = 0;  // 1-based; 0: every call of `call`
  std::string text;  // as written, for the WARNs
};

struct FaultRules {
  std::vector<FaultRule> rules;     // the well-formed ones, in written order
  std::vector<std::string> errors;  // one per malformed rule: "\"<rule>\": <why>"
};

// Parses CHORUS_FAULT's value. Malformed text is reported in `errors`, never thrown.
FaultRules parseFaultRules(std::string_view text);

// One communicator's rules (those for its rank) and its calls counted (fault_injection.cc).
struct FaultState;
void setUpFaults(ncclComm* comm);
ncclResult_t fireFaults(ncclComm* comm, FaultCall call);

// The hook of every collective and send/receive entry point (src/api/collectives.cc), after
// the argument checks and before the call is recorded. Counts the call and acts on the
// rules it matches: returns an error when the call must fail (a break, or an abort or revoke
// of the communicator while a stall or delay held the call), and then the communicator may
// already be gone (an abort): the caller returns at once. A kill does not return. Without
// rules for the communicator's rank it costs a call_once and a test.
inline ncclResult_t faultAtCall(ncclComm* comm, FaultCall call) {
  std::call_once(comm->faultsOnce, setUpFaults, comm);
  return comm->faults == nullptr ? ncclSuccess : fireFaults(comm, call);
}

// While one lives, this thread's calls are parts of a composite call (AlltoAll's sends and
// receives) and are not counted: the composite call was.
class FaultCompositeCall {
 public:
  FaultCompositeCall();
  ~FaultCompositeCall();
  FaultCompositeCall(const FaultCompositeCall&) = delete;
  FaultCompositeCall& operator=(const FaultCompositeCall&) = delete;
};

}  // namespace chorus
