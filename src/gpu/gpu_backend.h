// What each build's CUDA executor provides behind gpu_executor.h's replaceable entry
// points (gpu_hooks.cc): cuda_executor.cc, or no_cuda_executor.cc without nvcc.
#pragma once

#include "src/gpu/gpu_executor.h"

namespace chorus {

bool backendAvailable(std::string* why);
ncclResult_t backendEnqueue(ncclComm* comm, const std::vector<Lane*>& lanes, ncclDataType_t dtype, RedKind kind,
                            const std::vector<cudaStream_t>& streams);
ncclResult_t backendFlush(ncclComm* comm, bool launch);

}  // namespace chorus
