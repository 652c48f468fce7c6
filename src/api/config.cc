#include "src/api/config.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

// The smallest ncclConfig_t a program may pass: NCCL 2.14's (up to netName).
constexpr size_t kMinConfigSize = offsetof(ncclConfig_t, netName) + sizeof(const char*);
// NCCL 2.29 to 2.31 append these int fields after nvlinkCentricSched, in this order. A
// program built against those headers passes them; nccl.h here stops at 2.28's layout.
constexpr const char* kNewerIntFields[] = {"graphUsageMode",      "numRmaCtx",           "maxP2pPeers",
                                           "graphStreamOrdering", "launchOrderImplicit", "numRmaSig",
                                           "rmaEagerInit",        "hostCftMode",         "nvlsHostMode"};

// An int field of ncclConfig_t, its accepted range, and what Chorus does with it:
// `effect` null means it is honoured (read by parseConfig below); otherwise a set value
// gets one log line: INFO when the field cannot mean anything here, WARN when it could
// but is not honoured yet.
struct IntField {
  const char* name;
  size_t offset;
  int lo, hi;
  const char* effect;
  bool notHonouredYet;
};

constexpr int kAny = 0x7fffffff;
const IntField kIntFields[] = {
    {"blocking", offsetof(ncclConfig_t, blocking), 0, 1, nullptr, false},
    {"cgaClusterSize", offsetof(ncclConfig_t, cgaClusterSize), 0, 8,
     "no effect: Chorus' kernels use no thread-block clusters", false},
    {"minCTAs", offsetof(ncclConfig_t, minCTAs), 1, kAny, nullptr, false},
    {"maxCTAs", offsetof(ncclConfig_t, maxCTAs), 1, kAny, nullptr, false},
    {"splitShare", offsetof(ncclConfig_t, splitShare), 0, 1, nullptr, false},
    {"trafficClass", offsetof(ncclConfig_t, trafficClass), 0, 255, nullptr, false},
    {"collnetEnable", offsetof(ncclConfig_t, collnetEnable), 0, 1, "no effect: Chorus has no CollNet", false},
    {"CTAPolicy", offsetof(ncclConfig_t, CTAPolicy), 0, 3, "no effect: Chorus has one CTA policy", false},
    {"shrinkShare", offsetof(ncclConfig_t, shrinkShare), 0, 1, nullptr, false},
    {"nvlsCTAs", offsetof(ncclConfig_t, nvlsCTAs), 0, kAny, "no effect: Chorus has no NVLS algorithms", false},
    {"nChannelsPerNetPeer", offsetof(ncclConfig_t, nChannelsPerNetPeer), 1, kAny,
     "no effect: sends and receives use one connection per peer", false},
    {"nvlinkCentricSched", offsetof(ncclConfig_t, nvlinkCentricSched), 0, 1,
     "no effect: Chorus has no NVLink-centric scheduling", false},
};

bool hasField(const ncclConfig_t* user, size_t offset, size_t bytes) { return user->size >= offset + bytes; }

int readInt(const ncclConfig_t* user, size_t offset) {
  int value;
  memcpy(&value, reinterpret_cast<const char*>(user) + offset, sizeof(value));
  return value;
}

const char* readPointer(const ncclConfig_t* user, size_t offset) {
  const char* value;
  memcpy(&value, reinterpret_cast<const char*>(user) + offset, sizeof(value));
  return value;
}

// Reads every int field the struct has: refuses a value out of range, logs the ones set
// that Chorus does not act on, and returns the honoured ones in `out`.
ncclResult_t readIntFields(const ncclConfig_t* user, CommConfig* out, int* blocking, const char* func) {
  for (const IntField& f : kIntFields) {
    if (!hasField(user, f.offset, sizeof(int))) continue;
    const int value = readInt(user, f.offset);
    if (value == NCCL_CONFIG_UNDEF_INT) continue;
    if (value < f.lo || value > f.hi) {
      WARN("%s: invalid argument: config->%s is %d, expected %d to %d", func, f.name, value, f.lo, f.hi);
      return ncclInvalidArgument;
    }
    if (f.effect == nullptr) continue;
    if (f.notHonouredYet) {
      WARN("%s: config->%s = %d is %s", func, f.name, value, f.effect);
    } else {
      INFO(kSubsysInit | kSubsysEnv, "%s: config->%s = %d: %s", func, f.name, value, f.effect);
    }
  }
  auto field = [&](size_t offset) {
    return hasField(user, offset, sizeof(int)) ? readInt(user, offset) : NCCL_CONFIG_UNDEF_INT;
  };
  if (const int b = field(offsetof(ncclConfig_t, blocking)); b != NCCL_CONFIG_UNDEF_INT) *blocking = b;
  if (const int n = field(offsetof(ncclConfig_t, minCTAs)); n != NCCL_CONFIG_UNDEF_INT) out->minChannels = n;
  if (const int n = field(offsetof(ncclConfig_t, maxCTAs)); n != NCCL_CONFIG_UNDEF_INT) out->maxChannels = n;
  if (const int t = field(offsetof(ncclConfig_t, trafficClass)); t != NCCL_CONFIG_UNDEF_INT) out->trafficClass = t;
  if (const int v = field(offsetof(ncclConfig_t, splitShare)); v != NCCL_CONFIG_UNDEF_INT) out->splitShare = v != 0;
  if (const int v = field(offsetof(ncclConfig_t, shrinkShare)); v != NCCL_CONFIG_UNDEF_INT) out->shrinkShare = v != 0;
  if (out->minChannels > 0 && out->maxChannels > 0 && out->minChannels > out->maxChannels) {
    WARN("%s: invalid argument: config->minCTAs %d is larger than config->maxCTAs %d", func, out->minChannels,
         out->maxChannels);
    return ncclInvalidArgument;
  }
  // Fields of newer headers: accepted, each set one named (none of them applies here).
  size_t offset = offsetof(ncclConfig_t, nvlinkCentricSched) + sizeof(int);
  for (const char* name : kNewerIntFields) {
    if (hasField(user, offset, sizeof(int)) && readInt(user, offset) != NCCL_CONFIG_UNDEF_INT) {
      INFO(kSubsysInit | kSubsysEnv, "%s: config->%s = %d: no effect in Chorus", func, name, readInt(user, offset));
    }
    offset += sizeof(int);
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t parseConfig(const ncclConfig_t* user, CommConfig* out, const char* func) {
  *out = CommConfig{};
  int blocking = static_cast<int>(envIntInRange("NCCL_COMM_BLOCKING", 1, 0, 1));
  out->splitShare = envInt("NCCL_COMM_SPLIT_SHARE_RESOURCES", 0) != 0;
  out->shrinkShare = envInt("NCCL_COMM_SHRINK_SHARE_RESOURCES", 0) != 0;
  if (user != nullptr) {
    if (user->magic != NCCL_API_MAGIC) {
      WARN("%s: invalid argument: config->magic is 0x%x, expected 0x%x (initialize it with NCCL_CONFIG_INITIALIZER)",
           func, user->magic, NCCL_API_MAGIC);
      return ncclInvalidArgument;
    }
    if (user->size < kMinConfigSize || user->version < NCCL_VERSION(2, 14, 0)) {
      WARN("%s: invalid argument: config size %zu / version %u is not an ncclConfig_t this library knows", func,
           user->size, user->version);
      return ncclInvalidArgument;
    }
    // Older, smaller structs are accepted: only the fields they have are read.
    CHORUS_CHECK(readIntFields(user, out, &blocking, func));
    if (const char* net = readPointer(user, offsetof(ncclConfig_t, netName)); net != nullptr) {
      if (strlen(net) >= sizeof(PeerInfo::netName)) {
        WARN("%s: invalid argument: config->netName \"%s\" is longer than %zu characters", func, net,
             sizeof(PeerInfo::netName) - 1);
        return ncclInvalidArgument;
      }
      out->netName = net;
    }
    if (hasField(user, offsetof(ncclConfig_t, commName), sizeof(const char*))) {
      if (const char* name = readPointer(user, offsetof(ncclConfig_t, commName)); name != nullptr)
        out->commName = LogName(name);
    }
  }
  out->blocking = blocking != 0;
  return ncclSuccess;
}

}  // namespace chorus
