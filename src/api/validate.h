// Argument checks shared by the entry points. Each failing check prints one WARN
// naming the function, the argument and its value, and returns the NCCL error code.
#pragma once

#include <cstddef>
#include <optional>

#include "core/debug.h"
#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {

// Null, destroyed, or not a Chorus communicator: ncclInvalidArgument / ncclInvalidUsage.
ncclResult_t checkComm(const ncclComm* comm, const char* func);
ncclResult_t checkNotNull(const void* ptr, const char* arg, const char* func);
ncclResult_t checkDatatype(ncclDataType_t dtype, const char* func);
ncclResult_t checkRank(int value, int nranks, const char* arg, const char* func);
// count * typeSize(dtype) * factor must fit in size_t (and in a signed 64-bit offset).
ncclResult_t checkCount(size_t count, ncclDataType_t dtype, size_t factor, const char* func);
// Built-in op, or a PreMulSum op created on `comm` (for any type; the type match is
// checked when the call is planned).
ncclResult_t checkRedOp(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t dtype, const char* func);

// For the length of a call on `comm`: its lines and errors carry the communicator's rank
// and name (core/debug.h), when `comm` is a live communicator.
class CommLogScope {
 public:
  explicit CommLogScope(const ncclComm* comm) {
    if (comm != nullptr && isLiveComm(comm)) scope_.emplace(comm->rank, comm->config.commName);
  }

 private:
  std::optional<ScopedLogContext> scope_;
};

}  // namespace chorus
