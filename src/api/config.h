// ncclConfig_t as the communicator-creating entry points read it: structs of every size
// since NCCL 2.14 are accepted (only the fields they have are read), a value out of range
// is refused with a WARN naming the field.
#pragma once

#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {

// `user` may be NULL (defaults; NCCL_COMM_BLOCKING decides blocking).
ncclResult_t parseConfig(const ncclConfig_t* user, CommConfig* out, const char* func);

}  // namespace chorus
