#include "device/cpu/call_description.h"

#include <cstdio>

#include "device/common/datatypes.h"
#include "device/common/work.h"

namespace chorus {
namespace {

const char* kindName(uint8_t kind) {
  static const char* const kNames[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast",
                                       "Reduce",    "Send",          "Recv",      "LocalCopy"};
  return kind < sizeof(kNames) / sizeof(kNames[0]) ? kNames[kind] : "unknown call";
}

// ncclAvg is PreMulSum(1/n) for floating types and SumPostDiv(n) for integers (plan.cc).
const char* redOpName(uint8_t op) {
  switch (static_cast<RedKind>(op)) {
    case RedKind::Sum:
      return "sum";
    case RedKind::Prod:
      return "prod";
    case RedKind::Max:
      return "max";
    case RedKind::Min:
      return "min";
    case RedKind::PreMulSum:
      return "avg or premulsum";
    case RedKind::SumPostDiv:
      return "avg";
  }
  return "unknown op";
}

}  // namespace

std::string describeCall(const CallStamp& call) {
  const auto kind = static_cast<WorkKind>(call.kind);
  const char* proto = protocolName(static_cast<Protocol>(call.algoProto & 7));
  const char* where = (call.algoProto & kStampOnBoard) != 0 ? " on the board" : "";
  char text[160];
  if (kind == WorkKind::Send || kind == WorkKind::Recv) {
    snprintf(text, sizeof(text), "%s(%llu bytes; %s) #%llu", kindName(call.kind),
             static_cast<unsigned long long>(call.count), proto, static_cast<unsigned long long>(callNumber(call.seq)));
    return text;
  }
  const char* algo = algorithmName(static_cast<Algorithm>(call.algoProto >> 4));
  char op[48] = "";
  if (combinesValues(kind)) snprintf(op, sizeof(op), "%s, ", redOpName(call.redOp));
  char root[32] = "";
  if (call.root >= 0) snprintf(root, sizeof(root), ", root %d", call.root);
  snprintf(text, sizeof(text), "%s(%s%s, %llu%s; %s/%s%s) #%llu", kindName(call.kind), op,
           typeName(static_cast<ncclDataType_t>(call.dtype)), static_cast<unsigned long long>(call.count), root, algo,
           proto, where, static_cast<unsigned long long>(callNumber(call.seq)));
  return text;
}

}  // namespace chorus
