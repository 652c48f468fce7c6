#include "src/fault/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {

struct FaultState {
  std::vector<FaultRule> rules;                            // those naming this communicator's rank
  std::unique_ptr<std::atomic<uint64_t>[]> fired;          // per rule: how often it fired here
  std::array<std::atomic<uint64_t>, kFaultCalls> calls{};  // per kind: calls so far
  std::atomic<uint64_t> allCalls{0};
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<const char*, kFaultCalls> kCallNames = {
    "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter", "Send", "Recv"};

// A delay longer than a day is surely a typo (and would overflow nothing, but help no one).
constexpr uint64_t kMaxDelayUs = 24ull * 3600 * 1000 * 1000;
constexpr uint64_t kMaxNth = uint64_t(1) << 62;
// How long a stall or delay sleeps between looks at the abort and revoke flags: an abort
// must end it within milliseconds, as it ends any wait (ncclComm::haltWork).
constexpr auto kNap = std::chrono::milliseconds(5);

thread_local int tCompositeDepth = 0;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool equalsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool startsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && equalsNoCase(s.substr(0, prefix.size()), prefix);
}

// Decimal digits only (no sign, no blanks inside), at most `max`.
bool parseNumber(std::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > max) return false;
  *out = value;
  return true;
}

// Appended piece by piece: GCC 12 warns falsely (-Wrestrict) about "\"" + std::string(s).
std::string quoted(std::string_view s) {
  std::string out(1, '"');
  out.append(s);
  out += '"';
  return out;
}

bool parseCallName(std::string_view name, FaultCall* out) {
  if (startsWithNoCase(name, "nccl")) name.remove_prefix(4);
  if (equalsNoCase(name, "Bcast")) name = "Broadcast";  // ncclBcast is a Broadcast
  for (int i = 0; i < kFaultCalls; ++i) {
    if (equalsNoCase(name, kCallNames[i])) {
      *out = static_cast<FaultCall>(i);
      return true;
    }
  }
  return false;
}

// The parsers of a rule's parts: "" when well-formed, else why not.
std::string parseAction(std::string_view action, FaultRule* rule) {
  if (equalsNoCase(action, "kill")) {
    rule->action = FaultAction::Kill;
  } else if (equalsNoCase(action, "stall")) {
    rule->action = FaultAction::Stall;
  } else if (equalsNoCase(action, "break")) {
    rule->action = FaultAction::Break;
  } else if (startsWithNoCase(action, "delay=")) {
    const std::string_view amount = trim(action.substr(6));
    const size_t digits = std::min(amount.find_first_not_of("0123456789"), amount.size());
    const std::string_view unit = amount.substr(digits);
    const uint64_t scale = equalsNoCase(unit, "us")   ? 1
                           : equalsNoCase(unit, "ms") ? 1000
                           : equalsNoCase(unit, "s")  ? 1000000
                                                      : 0;
    uint64_t n = 0;
    if (scale == 0 || !parseNumber(amount.substr(0, digits), kMaxDelayUs / scale, &n))
      return "delay=<N><unit> needs a whole number and a unit us, ms or s (at most a day), not " + quoted(amount);
    rule->action = FaultAction::Delay;
    rule->delayUs = n * scale;
  } else {
    return "unknown action " + quoted(action) + " (kill, stall, delay=<N>us|ms|s, break)";
  }
  return "";
}

std::string parseCallSpec(std::string_view spec, FaultRule* rule) {
  const size_t hash = spec.find('#');
  const std::string_view name = trim(spec.substr(0, hash));
  if (hash != std::string_view::npos) {
    if (!parseNumber(trim(spec.substr(hash + 1)), kMaxNth, &rule->nth) || rule->nth == 0)
      return "the call number after '#' must be a whole number from 1, not " + quoted(spec.substr(hash + 1));
  }
  if (name.empty()) {
    if (hash == std::string_view::npos) return "no call after '@' (<Kind>, <Kind>#<N> or #<N>)";
    rule->anyCall = true;
    return "";
  }
  if (!parseCallName(name, &rule->call)) {
    return "unknown call " + quoted(name) +
           " (AllReduce, Broadcast, Bcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv)";
  }
  return "";
}

std::string parseRule(std::string_view text, FaultRule* rule) {
  rule->text = std::string(text);
  if (!startsWithNoCase(text, "rank")) return "a rule starts with rank<R>: (rank<R>:<action>@<call>)";
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return "no ':' after rank<R> (rank<R>:<action>@<call>)";
  uint64_t rank = 0;
  if (!parseNumber(trim(text.substr(4, colon - 4)), INT32_MAX, &rank))
    return "rank<R> needs a rank R, not " + quoted(text.substr(4, colon - 4));
  rule->rank = static_cast<int>(rank);
  const std::string_view rest = text.substr(colon + 1);
  const size_t at = rest.find('@');
  if (at == std::string_view::npos) return "no '@<call>' after the action (rank<R>:<action>@<call>)";
  if (std::string why = parseAction(trim(rest.substr(0, at)), rule); !why.empty()) return why;
  return parseCallSpec(trim(rest.substr(at + 1)), rule);
}

// The parsed rules of `text`, parsed (and their errors WARNed) once per process while the
// variable keeps its value: every communicator reads it, one WARN per malformed rule is enough.
std::shared_ptr<const FaultRules> rulesOf(const std::string& text) {
  static std::mutex mutex;
  static std::string parsedText;
  static std::shared_ptr<const FaultRules> parsed;
  std::lock_guard<std::mutex> lock(mutex);
  if (parsed == nullptr || parsedText != text) {
    auto rules = std::make_shared<FaultRules>(parseFaultRules(text));
    for (const std::string& error : rules->errors)
      WARN("CHORUS_FAULT=\"%s\": ignoring the malformed rule %s", text.c_str(), error.c_str());
    parsedText = text;
    parsed = std::move(rules);
  }
  return parsed;
}

bool matches(const FaultRule& rule, FaultCall call, uint64_t ofKind, uint64_t ofAll) {
  if (rule.anyCall) return ofAll == rule.nth;
  return rule.call == call && (rule.nth == 0 || ofKind == rule.nth);
}

std::string describeCall(FaultCall call, uint64_t ofKind, uint64_t ofAll) {
  return std::string(faultCallName(call)) + " #" + std::to_string(ofKind) + " (call #" + std::to_string(ofAll) +
         " on this communicator)";
}

std::string describeDelay(uint64_t us) {
  if (us % 1000000 == 0) return std::to_string(us / 1000000) + " s";
  if (us % 1000 == 0) return std::to_string(us / 1000) + " ms";
  return std::to_string(us) + " us";
}

// A rule's first firing on a communicator is a WARN; a rule that fires on every call of a
// kind ("rank0:delay=1ms@Send") says the later ones at INFO, not in every log.
#define FAULT_SAY(first, ...)         \
  do {                                \
    if (first) {                      \
      WARN(__VA_ARGS__);              \
    } else {                          \
      INFO(kSubsysColl, __VA_ARGS__); \
    }                                 \
  } while (0)

[[noreturn]] void killThisProcess(const ncclComm* comm, const FaultRule& rule, const std::string& where) {
  WARN("CHORUS_FAULT: rank %d killing its process (pid %d) at %s, as rule \"%s\" asks", comm->rank,
       static_cast<int>(getpid()), where.c_str(), rule.text.c_str());
  // SIGKILL, not exit: the peers must see a process die without any of its clean-up, as
  // after a crash or the OOM killer; nothing of this process runs after it.
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

// Holds the call until `until` (forever without one), in naps that watch the abort and
// revoke flags. Counted as the communicator's work meanwhile, so that ncclCommAbort waits
// for it to leave before freeing the communicator (ncclComm::haltWork).
ncclResult_t hold(ncclComm* comm, std::optional<Clock::time_point> until, const char* what, const std::string& where) {
  comm->activeRuns.fetch_add(1);
  ncclResult_t result = ncclSuccess;
  for (;;) {
    const bool aborted = comm->abortFlag.load() != 0;
    if (aborted || comm->revokeFlag.load() != 0) {
      WARN("CHORUS_FAULT: rank %d: the communicator was %s during the injected %s at %s; the call fails", comm->rank,
           aborted ? "aborted (ncclCommAbort)" : "revoked (ncclCommRevoke or NCCL_SHRINK_ABORT)", what, where.c_str());
      result = ncclSystemError;  // as a wait of the call's own work would report it
      break;
    }
    const Clock::time_point now = Clock::now();
    if (until && now >= *until) break;
    Clock::duration nap = kNap;
    if (until) nap = std::min(nap, *until - now);
    std::this_thread::sleep_for(nap);
  }
  comm->activeRuns.fetch_sub(1);  // last: an abort may free the communicator from here on
  return result;
}

// Marks every connection of this rank on the communicator broken and fails the
// communicator, as a rank whose work failed does (src/group/group.cc): the call returns
// ncclRemoteError without running, and every peer waiting on this rank fails at once
// instead of at its timeout. Not one connection alone: this rank would then fail while
// the others waiting on it through other connections would hang until CHORUS_TIMEOUT,
// or (a connection that no one happens to wait on) nothing would fail at all.
ncclResult_t breakConnections(ncclComm* comm, const FaultRule& rule, const std::string& where, bool first) {
  FAULT_SAY(first,
            "CHORUS_FAULT: rank %d breaking its connections at %s, as rule \"%s\" asks: the call and the "
            "communicator fail (ncclRemoteError)",
            comm->rank, where.c_str(), rule.text.c_str());
  comm->breakConnections();
  {
    std::lock_guard<std::mutex> lock(comm->asyncMutex);  // a non-blocking worker's result does not replace it
    comm->asyncResult.store(ncclRemoteError);
  }
  return ncclRemoteError;
}

ncclResult_t act(ncclComm* comm, const FaultRule& rule, const std::string& where, bool first) {
  switch (rule.action) {
    case FaultAction::Kill:
      killThisProcess(comm, rule, where);
    case FaultAction::Stall:
      FAULT_SAY(first,
                "CHORUS_FAULT: rank %d stalling at %s until the communicator is aborted or revoked, as rule "
                "\"%s\" asks",
                comm->rank, where.c_str(), rule.text.c_str());
      return hold(comm, std::nullopt, "stall", where);
    case FaultAction::Delay:
      FAULT_SAY(first, "CHORUS_FAULT: rank %d delaying %s by %s, as rule \"%s\" asks", comm->rank, where.c_str(),
                describeDelay(rule.delayUs).c_str(), rule.text.c_str());
      return hold(comm, Clock::now() + std::chrono::microseconds(rule.delayUs), "delay", where);
    case FaultAction::Break:
      return breakConnections(comm, rule, where, first);
  }
  return ncclSuccess;
}

}  // namespace

const char* faultCallName(FaultCall call) { return kCallNames[static_cast<int>(call)]; }

FaultRules parseFaultRules(std::string_view text) {
  FaultRules out;
  while (!text.empty()) {
    const size_t end = std::min(text.find_first_of(",;"), text.size());
    const std::string_view piece = trim(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    if (piece.empty()) continue;
    FaultRule rule;
    if (std::string why = parseRule(piece, &rule); !why.empty()) {
      out.errors.push_back(quoted(piece) + ": " + why);
    } else {
      out.rules.push_back(std::move(rule));
    }
  }
  return out;
}

void setUpFaults(ncclComm* comm) {
  try {  // nothing may escape through the C API: out of memory here means no faults
    const std::optional<std::string> text = envValue("CHORUS_FAULT");
    if (!text || trim(*text).empty()) return;
    const std::shared_ptr<const FaultRules> all = rulesOf(*text);
    auto state = std::make_shared<FaultState>();
    for (const FaultRule& rule : all->rules)
      if (rule.rank == comm->rank) state->rules.push_back(rule);
    if (state->rules.empty()) return;
    state->fired = std::make_unique<std::atomic<uint64_t>[]>(state->rules.size());
    INFO(kSubsysInit, "CHORUS_FAULT: %zu rule(s) for rank %d of communicator %p", state->rules.size(), comm->rank,
         static_cast<void*>(comm));
    comm->faults = std::move(state);
  } catch (const std::exception& e) {
    WARN("CHORUS_FAULT: ignored for communicator %p: %s", static_cast<void*>(comm), e.what());
  }
}

ncclResult_t fireFaults(ncclComm* comm, FaultCall call) {
  if (tCompositeDepth > 0) return ncclSuccess;  // a part of a composite call, which was counted
  FaultState& s = *comm->faults;
  const uint64_t ofKind = s.calls[static_cast<int>(call)].fetch_add(1) + 1;
  const uint64_t ofAll = s.allCalls.fetch_add(1) + 1;
  for (size_t i = 0; i < s.rules.size(); ++i) {
    if (!matches(s.rules[i], call, ofKind, ofAll)) continue;
    const bool first = s.fired[i].fetch_add(1) == 0;
    const ncclResult_t r = act(comm, s.rules[i], describeCall(call, ofKind, ofAll), first);
    if (r != ncclSuccess) return r;  // an abort ended a stall, or the rule broke the communicator
  }
  return ncclSuccess;
}

FaultCompositeCall::FaultCompositeCall() { ++tCompositeDepth; }
FaultCompositeCall::~FaultCompositeCall() { --tCompositeDepth; }

}  // namespace chorus
