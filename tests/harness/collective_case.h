// One collective call with nccl-tests style inputs and a host reference.
//
// Inputs are small integers chosen so that sums, products, min and max are exact
// in every format (see inputValue), so those results compare exactly; avg and
// PreMulSum results on floating types compare within DataTypeTraits::avgTolerance
// times max(1, sum of |terms|) — the sum of magnitudes rather than |result|
// because partial sums can be larger than a result that cancels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "nccl.h"

namespace chorus_test {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
enum class OpKind { kSum, kProd, kMax, kMin, kAvg, kPreMulSumImmediate, kPreMulSumDevice };

const char* collectiveName(Collective collective);
const char* opKindName(OpKind op);
bool isReducing(Collective collective);
bool hasRoot(Collective collective);
const std::vector<OpKind>& allOpKinds();

struct CollectiveCase {
  Collective collective = Collective::kAllReduce;
  ncclDataType_t type = ncclFloat32;
  OpKind op = OpKind::kSum;  // ignored by AllGather and Broadcast
  size_t count = 0;          // the API's count argument (per rank for AllGather/ReduceScatter)
  bool inPlace = false;
  int root = 0;       // Broadcast and Reduce only
  uint64_t seed = 0;  // varies inputs between calls so stale results cannot pass
};

// Rounds a case makes: PreMulSum with a device scalar runs twice, changing the
// scalar in between, to prove the scalar is read when the collective runs.
int roundsOf(const CollectiveCase& testCase);

// The value each rank contributes at each element of its send buffer:
// value(rank, index) = table[(slot(index) + rank) % kSlots], with a per-case random
// table and a hashed slot per element. Every element and rank looks random, yet
// the reduction over ranks depends only on slot(index), so the reference is a
// kSlots-entry table and checking costs O(count) per rank, not O(nranks × count).
class InputPattern {
 public:
  static constexpr uint32_t kSlots = 64;  // a multiple of 4: see the product table
  InputPattern(const CollectiveCase& testCase, int nranks);
  uint32_t slot(size_t index) const;
  double tableValue(uint32_t slot) const { return table_[slot % kSlots]; }
  double value(int rank, size_t index) const { return tableValue(slot(index) + static_cast<uint32_t>(rank)); }

 private:
  uint64_t seed_;
  double table_[kSlots];
};
double inputValue(const CollectiveCase& testCase, int nranks, int rank, size_t index);
// The PreMulSum scalar for `round` (integers 3 then 2; floats 0.75 then 1.5).
double preMulScalar(ncclDataType_t type, int round);

// Buffers and state of one rank for one case at a time. Usage per case:
//   for each round: prepare → issue (possibly inside a group with other ranks) → verify;
//   then finish. Failures go to the FailureLog; the runner never throws on them.
class CollectiveRankRunner {
 public:
  CollectiveRankRunner(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  CollectiveRankRunner(const CollectiveRankRunner&) = delete;
  CollectiveRankRunner& operator=(const CollectiveRankRunner&) = delete;

  // Creates the PreMulSum op at round 0 and fills the buffers. False: skip the case.
  bool prepare(const CollectiveCase& testCase, int round, ncclComm_t comm, FailureLog& log);
  ncclResult_t issue(const CollectiveCase& testCase, ncclComm_t comm);
  void verify(const CollectiveCase& testCase, int round, FailureLog& log);
  void finish(const CollectiveCase& testCase, ncclComm_t comm, FailureLog& log);

  // All rounds of a case on this rank, checking each call's return code.
  void run(const CollectiveCase& testCase, ncclComm_t comm, FailureLog& log);

 private:
  struct GuardedBuffer {
    std::vector<unsigned char> storage;  // guard | data | guard
    size_t dataBytes = 0;
    unsigned char* data() { return storage.data() + kGuardBytes; }
    void allocate(size_t bytes);
    bool guardsIntact() const;
  };
  static constexpr size_t kGuardBytes = 64;
  static constexpr unsigned char kGuardByte = 0xA5;

  void fillInputs(const CollectiveCase& testCase);
  void verifyReceived(const CollectiveCase& testCase, int round, FailureLog& log);
  Mismatch mismatchTemplate(const CollectiveCase& testCase) const;

  int rank_;
  int nranks_;
  GuardedBuffer send_;
  GuardedBuffer recv_;
  std::vector<unsigned char> sendSnapshot_;  // out of place: the send buffer must not change
  void* sendPointer_ = nullptr;
  void* recvPointer_ = nullptr;
  alignas(16) unsigned char scalar_[16] = {};
  ncclRedOp_t createdOp_ = ncclSum;
  bool haveCreatedOp_ = false;
};

}  // namespace chorus_test
