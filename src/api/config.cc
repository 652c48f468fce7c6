#include "src/api/config.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

constexpr unsigned int kConfigMagic = 0xcafebeef;
// The smallest ncclConfig_t a program may pass: NCCL 2.14's (up to netName).
constexpr size_t kMinConfigSize = offsetof(ncclConfig_t, netName) + sizeof(const char*);

}  // namespace

ncclResult_t parseConfig(const ncclConfig_t* user, CommConfig* out, const char* func) {
  *out = CommConfig{};
  int blocking = static_cast<int>(envInt("NCCL_COMM_BLOCKING", 1));
  if (user != nullptr) {
    if (user->magic != kConfigMagic) {
      WARN("%s: invalid argument: config->magic is 0x%x, expected 0x%x (initialize it with NCCL_CONFIG_INITIALIZER)",
           func, user->magic, kConfigMagic);
      return ncclInvalidArgument;
    }
    if (user->size < kMinConfigSize || user->version < NCCL_VERSION(2, 14, 0)) {
      WARN("%s: invalid argument: config size %zu / version %u is not an ncclConfig_t this library knows", func,
           user->size, user->version);
      return ncclInvalidArgument;
    }
    // Older, smaller structs are accepted: read only the fields they have.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    memcpy(&config, user, std::min(user->size, sizeof(config)));
    if (config.blocking != NCCL_CONFIG_UNDEF_INT) {
      if (config.blocking != 0 && config.blocking != 1) {
        WARN("%s: invalid argument: config->blocking is %d, expected 0 or 1", func, config.blocking);
        return ncclInvalidArgument;
      }
      blocking = config.blocking;
    }
    if (user->size >= offsetof(ncclConfig_t, commName) + sizeof(const char*) && config.commName)
      out->commName = config.commName;
  }
  out->blocking = blocking != 0;
  return ncclSuccess;
}

}  // namespace chorus
