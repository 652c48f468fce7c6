#include "src/api/validate.h"

#include <cstdint>
#include <cstdio>

#include "core/debug.h"
#include "device/common/datatypes.h"

namespace chorus {

ncclResult_t CommCall::check(const char* func) const {
  if (pin_) return ncclSuccess;
  if (requested_ == nullptr) {
    WARN("%s: invalid argument: comm is NULL", func);
    return ncclInvalidArgument;
  }
  WARN("%s: invalid usage: comm %p is not a live communicator (destroyed or never created)", func,
       static_cast<const void*>(requested_));
  return ncclInvalidUsage;
}

ncclResult_t checkNotNull(const void* ptr, const char* arg, const char* func) {
  if (ptr == nullptr) {
    WARN("%s: invalid argument: %s is NULL", func, arg);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkDatatype(ncclDataType_t dtype, const char* func) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= ncclNumTypes) {
    WARN("%s: invalid argument: datatype %d is not a valid ncclDataType_t (0..%d)", func, static_cast<int>(dtype),
         ncclNumTypes - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkRank(int value, int nranks, const char* arg, const char* func) {
  if (value < 0 || value >= nranks) {
    WARN("%s: invalid argument: %s %d is out of range for a communicator of %d ranks", func, arg, value, nranks);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkCount(size_t count, ncclDataType_t dtype, size_t factor, const char* func) {
  size_t bytes = 0;  // the limit's divisions only on the error path: this runs on every call
  if (__builtin_mul_overflow(count, typeSize(dtype) * factor, &bytes) || bytes > static_cast<size_t>(INT64_MAX)) {
    const size_t limit = static_cast<size_t>(INT64_MAX) / typeSize(dtype) / factor;
    WARN("%s: invalid argument: count %zu of %s overflows the addressable size (at most %zu elements here)", func,
         count, typeName(dtype), limit);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t checkRedOp(const ncclComm* comm, ncclRedOp_t op, ncclDataType_t dtype, const char* func,
                        UserRedOp* userOp) {
  const int value = static_cast<int>(op);
  if (value >= 0 && value < ncclNumOps) return ncclSuccess;
  if (!comm->userOps.find(value - ncclNumOps, userOp)) {
    WARN("%s: invalid argument: op %d is not a built-in ncclRedOp_t nor an op created on this communicator", func,
         value);
    return ncclInvalidArgument;
  }
  if (userOp->dtype != dtype) {
    WARN("%s: invalid argument: op %d was created for datatype %s but is used with %s", func, value,
         typeName(userOp->dtype), typeName(dtype));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

}  // namespace chorus
