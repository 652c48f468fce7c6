// Argument checks shared by the entry points. Each failing check prints one WARN
// naming the function, the argument and its value, and returns the NCCL error code.
#pragma once

#include <cstddef>
#include <optional>

#include "core/debug.h"
#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {

ncclResult_t checkNotNull(const void* ptr, const char* arg, const char* func);
ncclResult_t checkDatatype(ncclDataType_t dtype, const char* func);
ncclResult_t checkRank(int value, int nranks, const char* arg, const char* func);
// count * typeSize(dtype) * factor must fit in size_t (and in a signed 64-bit offset).
ncclResult_t checkCount(size_t count, ncclDataType_t dtype, size_t factor, const char* func);
// Built-in op, or a PreMulSum op created on `comm` for `dtype`, whose definition is copied
// into *userOp (the call keeps it: the op may be destroyed once the call returns).
ncclResult_t checkRedOp(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t dtype, const char* func,
                        UserRedOp* userOp);

// An API call's hold on its communicator, for the length of the call: a pin, so that an
// abort or destroy on another thread waits until the call has left (comm_registry.h), and
// the call's lines and errors carry the communicator's rank and name (core/debug.h).
class CommCall {
 public:
  explicit CommCall(ncclComm* comm) : requested_(comm), pin_(comm) {
    if (pin_) scope_.emplace(comm->rank, comm->config.commName);
  }
  // ncclSuccess when the communicator is held. Else a WARN naming `func`, and
  // ncclInvalidArgument for NULL, ncclInvalidUsage for a destroyed (or never created) one.
  ncclResult_t check(const char* func) const;
  // Lets go of the communicator early (its destroy, once it has closed it).
  void release() { pin_.release(); }

 private:
  const ncclComm* requested_;
  CommPin pin_;
  std::optional<ScopedLogContext> scope_;
};

}  // namespace chorus
