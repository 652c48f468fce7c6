// The eight collectives that have an nccl*Config form (NCCL 2.31+), issued through the
// plain or the Config entry point with exact inputs, their results checked element by
// element against a host reference.
//
// Input: element j of rank r's send buffer is (r + 1) * 10000 + j, exact in int32 and
// float32 for the counts used here (sums over 8 ranks stay below 2^24).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace chorus_test {

enum class ConfigForm { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter };
inline constexpr ConfigForm kAllConfigForms[] = {
    ConfigForm::kAllReduce,     ConfigForm::kBroadcast, ConfigForm::kReduce, ConfigForm::kAllGather,
    ConfigForm::kReduceScatter, ConfigForm::kAlltoAll,  ConfigForm::kGather, ConfigForm::kScatter};
const char* configFormName(ConfigForm form);  // "AllReduce"

struct FormCall {
  ConfigForm form = ConfigForm::kAllReduce;
  bool plain = false;                        // the plain entry point (config unused)
  const ncclCollConfig_t* config = nullptr;  // the Config form's argument, NULL allowed
  ncclDataType_t type = ncclInt32;           // ncclInt32 or ncclFloat32
  size_t count = 1031;                       // the API's count (per rank where the API says so)
  int root = 0;                              // Broadcast, Reduce, Gather, Scatter; the op is always sum
  std::string describe() const;              // "ncclAllReduceConfig int32 count 1031"
};

// One rank's buffers for one call: prepare, issue (possibly inside a group), check.
class FormBuffers {
 public:
  void prepare(const FormCall& call, int rank, int nranks);  // inputs; the receive buffer poisoned
  ncclResult_t issue(const FormCall& call, ncclComm_t comm);
  // "" when every element this rank must hold is right; else the first wrong one.
  std::string check(const FormCall& call, int rank, int nranks) const;
  bool receiveUntouched() const;  // still poisoned: nothing wrote it

 private:
  std::vector<float> sendF_, recvF_;
  std::vector<int32_t> sendI_, recvI_;
};

// prepare, issue and check, outside any group; "" when right.
std::string runForm(const FormCall& call, ncclComm_t comm, int rank, int nranks);

}  // namespace chorus_test
