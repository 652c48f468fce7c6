#include "harness/collective_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "harness/datatypes.h"

namespace chorus_test {
namespace {

uint64_t mix64(uint64_t value) {  // splitmix64 finaliser: cheap, well spread
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

bool isPreMulSum(OpKind op) { return op == OpKind::kPreMulSumImmediate || op == OpKind::kPreMulSumDevice; }

// Largest |input| such that any partial reduction over nranks inputs stays an
// exactly representable integer (fp8 e5m2 with 8 ranks: 1, since 8 is its limit).
double amplitudeFor(const CollectiveCase& testCase, int nranks) {
  const DataTypeTraits& traits = traitsOf(testCase.type);
  double base = traits.isSigned ? 4 : 7;
  double divisor = nranks * ((isPreMulSum(testCase.op) && !traits.isFloat) ? 3.0 : 1.0);
  return std::max(1.0, std::min(base, std::floor(traits.exactIntLimit / divisor)));
}

ncclRedOp_t builtinOp(OpKind op) {
  switch (op) {
    case OpKind::kSum:
      return ncclSum;
    case OpKind::kProd:
      return ncclProd;
    case OpKind::kMax:
      return ncclMax;
    case OpKind::kMin:
      return ncclMin;
    case OpKind::kAvg:
      return ncclAvg;
    default:
      return ncclSum;
  }
}

struct Expectation {
  double value;
  double tolerance;  // 0: exact
};

// The reduced value of every slot (see InputPattern), computed in double once per case.
class ReferenceModel {
 public:
  ReferenceModel(const CollectiveCase& testCase, const InputPattern& inputs, int round, int nranks) {
    const DataTypeTraits& traits = traitsOf(testCase.type);
    // An immediate scalar is read once at creation: always round 0's value.
    const double scalar = preMulScalar(testCase.type, testCase.op == OpKind::kPreMulSumImmediate ? 0 : round);
    for (uint32_t slot = 0; slot < InputPattern::kSlots; ++slot) {
      double sum = 0, product = 1, sumOfMagnitudes = 0;
      double maximum = -std::numeric_limits<double>::infinity(), minimum = std::numeric_limits<double>::infinity();
      for (int rank = 0; rank < nranks; ++rank) {
        double x = inputs.tableValue(slot + static_cast<uint32_t>(rank));
        sum += x;
        product *= x;
        sumOfMagnitudes += std::fabs(x);
        maximum = std::max(maximum, x);
        minimum = std::min(minimum, x);
      }
      Expectation& e = bySlot_[slot];
      switch (testCase.op) {
        case OpKind::kSum:
          e = {sum, 0};
          break;
        case OpKind::kProd:
          e = {product, 0};
          break;
        case OpKind::kMax:
          e = {maximum, 0};
          break;
        case OpKind::kMin:
          e = {minimum, 0};
          break;
        case OpKind::kAvg:
          e = traits.isFloat ? Expectation{sum / nranks, traits.avgTolerance * std::max(1.0, sumOfMagnitudes / nranks)}
                             : Expectation{std::trunc(sum / nranks), 0};  // integer avg: C truncation
          break;
        case OpKind::kPreMulSumImmediate:
        case OpKind::kPreMulSumDevice:
          e = traits.isFloat
                  ? Expectation{scalar * sum, traits.avgTolerance * std::max(1.0, std::fabs(scalar) * sumOfMagnitudes)}
                  : Expectation{scalar * sum, 0};
          break;
      }
    }
  }
  Expectation expected(const InputPattern& inputs, size_t index) const { return bySlot_[inputs.slot(index)]; }

 private:
  Expectation bySlot_[InputPattern::kSlots];
};

// Per-type fill for bytes nobody should leave untouched: NaN for floating types;
// for integers a value no test result can take (127 for signed, all ones for unsigned).
unsigned char sentinelByte(ncclDataType_t type) {
  const DataTypeTraits& traits = traitsOf(type);
  if (traits.isFloat) return 0xFF;
  return traits.isSigned ? 0x7F : 0xFF;
}

}  // namespace

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kAllGather:
      return "AllGather";
    case Collective::kBroadcast:
      return "Broadcast";
    case Collective::kReduce:
      return "Reduce";
  }
  return "?";
}

const char* opKindName(OpKind op) {
  switch (op) {
    case OpKind::kSum:
      return "sum";
    case OpKind::kProd:
      return "prod";
    case OpKind::kMax:
      return "max";
    case OpKind::kMin:
      return "min";
    case OpKind::kAvg:
      return "avg";
    case OpKind::kPreMulSumImmediate:
      return "premulsum(host-immediate)";
    case OpKind::kPreMulSumDevice:
      return "premulsum(device)";
  }
  return "?";
}

bool isReducing(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduceScatter ||
         collective == Collective::kReduce;
}

bool hasRoot(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce;
}

const std::vector<OpKind>& allOpKinds() {
  static const std::vector<OpKind> kOps = {OpKind::kSum,
                                           OpKind::kProd,
                                           OpKind::kMax,
                                           OpKind::kMin,
                                           OpKind::kAvg,
                                           OpKind::kPreMulSumImmediate,
                                           OpKind::kPreMulSumDevice};
  return kOps;
}

int roundsOf(const CollectiveCase& testCase) {
  return isReducing(testCase.collective) && testCase.op == OpKind::kPreMulSumDevice ? 2 : 1;
}

InputPattern::InputPattern(const CollectiveCase& testCase, int nranks) : seed_(testCase.seed) {
  const bool isSigned = traitsOf(testCase.type).isSigned;
  const bool isProduct = isReducing(testCase.collective) && testCase.op == OpKind::kProd;
  const auto amplitude = static_cast<uint64_t>(amplitudeFor(testCase, nranks));
  for (uint32_t k = 0; k < kSlots; ++k) {
    uint64_t hash = mix64(seed_ * 0x2545F4914F6CDD1Dull + k);
    if (isProduct) {
      // 2s only in every 4th slot: any 8 consecutive ranks hold at most two of
      // them, so |product| <= 4 fits int8 and fp8; signs mixed where allowed.
      double magnitude = (k % 4 == 0 && (hash & 1)) ? 2 : 1;
      table_[k] = (isSigned && (hash >> 1) % 3 == 0) ? -magnitude : magnitude;
    } else if (isSigned) {
      table_[k] = static_cast<double>((hash >> 8) % (2 * amplitude + 1)) - static_cast<double>(amplitude);
    } else {
      table_[k] = static_cast<double>((hash >> 8) % (amplitude + 1));
    }
  }
}

uint32_t InputPattern::slot(size_t index) const {
  return static_cast<uint32_t>(mix64(seed_ * 0x100000001B3ull + index) % kSlots);
}

double inputValue(const CollectiveCase& testCase, int nranks, int rank, size_t index) {
  return InputPattern(testCase, nranks).value(rank, index);
}

double preMulScalar(ncclDataType_t type, int round) {
  if (traitsOf(type).isFloat) return round == 0 ? 0.75 : 1.5;  // exact in every float format, not powers of two
  return round == 0 ? 3 : 2;
}

void CollectiveRankRunner::GuardedBuffer::allocate(size_t bytes) {
  dataBytes = bytes;
  storage.assign(bytes + 2 * kGuardBytes, kGuardByte);
}

bool CollectiveRankRunner::GuardedBuffer::guardsIntact() const {
  auto isGuard = [](unsigned char b) { return b == kGuardByte; };
  return std::all_of(storage.begin(), storage.begin() + kGuardBytes, isGuard) &&
         std::all_of(storage.end() - kGuardBytes, storage.end(), isGuard);
}

bool CollectiveRankRunner::prepare(const CollectiveCase& testCase, int round, ncclComm_t comm, FailureLog& log) {
  bool preMul = isReducing(testCase.collective) && isPreMulSum(testCase.op);
  if (preMul && round == 0) {
    storeElement(testCase.type, scalar_, 0, preMulScalar(testCase.type, 0));
    ncclScalarResidence_t residence =
        testCase.op == OpKind::kPreMulSumDevice ? ncclScalarDevice : ncclScalarHostImmediate;
    ncclResult_t createResult = ncclRedOpCreatePreMulSum(&createdOp_, scalar_, testCase.type, residence, comm);
    if (createResult != ncclSuccess) {
      Mismatch where = mismatchTemplate(testCase);
      log.add(where.collective + " " + where.type + " " + where.op + ": ncclRedOpCreatePreMulSum returned " +
              resultName(createResult));
      return false;
    }
    haveCreatedOp_ = true;
    // Immediate residence must have copied the value: scribble over it to prove it.
    if (testCase.op == OpKind::kPreMulSumImmediate)
      storeElement(testCase.type, scalar_, 0, preMulScalar(testCase.type, 1));
  }
  if (preMul && testCase.op == OpKind::kPreMulSumDevice)
    storeElement(testCase.type, scalar_, 0, preMulScalar(testCase.type, round));
  fillInputs(testCase);
  return true;
}

void CollectiveRankRunner::fillInputs(const CollectiveCase& testCase) {
  const size_t elementSize = traitsOf(testCase.type).size;
  const size_t count = testCase.count;
  const size_t n = static_cast<size_t>(nranks_);
  const unsigned char sentinel = sentinelByte(testCase.type);
  const InputPattern inputs(testCase, nranks_);
  // Inputs are integers in [-8, 8]: encode each once, then copy bytes per element.
  unsigned char encoded[17][8];
  const bool isSigned = traitsOf(testCase.type).isSigned;
  for (int value = -8; value <= 8; ++value) {
    storeElement(testCase.type, encoded[value + 8], 0, isSigned ? value : std::max(value, 0));
  }
  auto fill = [&](void* buffer, size_t elements) {
    auto fillSized = [&]<size_t kSize>() {  // fixed-size copies compile to single stores
      auto* out = static_cast<unsigned char*>(buffer);
      for (size_t i = 0; i < elements; ++i) {
        std::memcpy(out + i * kSize, encoded[static_cast<int>(inputs.value(rank_, i)) + 8], kSize);
      }
    };
    switch (elementSize) {
      case 1:
        return fillSized.template operator()<1>();
      case 2:
        return fillSized.template operator()<2>();
      case 4:
        return fillSized.template operator()<4>();
      default:
        return fillSized.template operator()<8>();
    }
  };
  size_t sendElements = count, recvElements = count;
  if (testCase.collective == Collective::kReduceScatter) sendElements = n * count;
  if (testCase.collective == Collective::kAllGather) recvElements = n * count;

  if (testCase.inPlace) {
    recv_.allocate(std::max(sendElements, recvElements) * elementSize);
    std::memset(recv_.data(), sentinel, recv_.dataBytes);
    unsigned char* base = recv_.data();
    sendPointer_ = recvPointer_ = base;
    if (testCase.collective == Collective::kAllGather) sendPointer_ = base + rank_ * count * elementSize;
    if (testCase.collective == Collective::kReduceScatter) recvPointer_ = base + rank_ * count * elementSize;
    bool hasInput = testCase.collective != Collective::kBroadcast || rank_ == testCase.root;
    if (hasInput) {
      fill(sendPointer_, sendElements);
    }
    sendSnapshot_.clear();
    return;
  }
  send_.allocate(sendElements * elementSize);
  recv_.allocate(recvElements * elementSize);
  std::memset(recv_.data(), sentinel, recv_.dataBytes);
  fill(send_.data(), sendElements);
  sendSnapshot_.assign(send_.data(), send_.data() + send_.dataBytes);
  sendPointer_ = send_.data();
  recvPointer_ = recv_.data();
}

ncclResult_t CollectiveRankRunner::issue(const CollectiveCase& testCase, ncclComm_t comm) {
  ncclRedOp_t op = (isReducing(testCase.collective) && isPreMulSum(testCase.op)) ? createdOp_ : builtinOp(testCase.op);
  cudaStream_t stream = nullptr;
  switch (testCase.collective) {
    case Collective::kAllReduce:
      return ncclAllReduce(sendPointer_, recvPointer_, testCase.count, testCase.type, op, comm, stream);
    case Collective::kReduceScatter:
      return ncclReduceScatter(sendPointer_, recvPointer_, testCase.count, testCase.type, op, comm, stream);
    case Collective::kAllGather:
      return ncclAllGather(sendPointer_, recvPointer_, testCase.count, testCase.type, comm, stream);
    case Collective::kBroadcast:
      return ncclBroadcast(sendPointer_, recvPointer_, testCase.count, testCase.type, testCase.root, comm, stream);
    case Collective::kReduce:
      return ncclReduce(sendPointer_, recvPointer_, testCase.count, testCase.type, op, testCase.root, comm, stream);
  }
  return ncclInternalError;
}

Mismatch CollectiveRankRunner::mismatchTemplate(const CollectiveCase& testCase) const {
  Mismatch mismatch;
  mismatch.collective = collectiveName(testCase.collective);
  mismatch.type = traitsOf(testCase.type).name;
  mismatch.op = isReducing(testCase.collective) ? opKindName(testCase.op) : "-";
  mismatch.count = testCase.count;
  mismatch.inPlace = testCase.inPlace;
  mismatch.root = hasRoot(testCase.collective) ? testCase.root : -1;
  mismatch.rank = rank_;
  return mismatch;
}

void CollectiveRankRunner::verify(const CollectiveCase& testCase, int round, FailureLog& log) {
  Mismatch where = mismatchTemplate(testCase);
  std::string prefix = where.collective + " type=" + where.type + " op=" + where.op +
                       " count=" + std::to_string(where.count) + " inPlace=" + (where.inPlace ? "yes" : "no") +
                       " rank " + std::to_string(rank_) + ": ";
  if (!recv_.guardsIntact() || (!testCase.inPlace && !send_.guardsIntact())) {
    log.add(prefix + "wrote outside the user buffers (guard bytes changed)");
  }
  if (!testCase.inPlace && std::memcmp(send_.data(), sendSnapshot_.data(), sendSnapshot_.size()) != 0) {
    log.add(prefix + "modified the send buffer of an out-of-place call");
  }
  verifyReceived(testCase, round, log);
}

void CollectiveRankRunner::verifyReceived(const CollectiveCase& testCase, int round, FailureLog& log) {
  const size_t count = testCase.count;
  const size_t n = static_cast<size_t>(nranks_);
  const InputPattern inputs(testCase, nranks_);
  const ReferenceModel reference(testCase, inputs, round, nranks_);
  Mismatch first = mismatchTemplate(testCase);
  size_t wrong = 0;
  auto check = [&](size_t index, double expected, double tolerance) {
    double got = loadElement(testCase.type, recvPointer_, index);
    bool ok = tolerance > 0 ? std::fabs(got - expected) <= tolerance : got == expected;
    if (ok) return;
    if (wrong++ == 0) {
      first.index = index;
      first.expected = expected;
      first.got = got;
      first.tolerance = tolerance;
    }
  };
  switch (testCase.collective) {
    case Collective::kAllReduce:
      for (size_t i = 0; i < count; ++i) {
        Expectation e = reference.expected(inputs, i);
        check(i, e.value, e.tolerance);
      }
      break;
    case Collective::kReduceScatter:
      for (size_t i = 0; i < count; ++i) {
        Expectation e = reference.expected(inputs, rank_ * count + i);
        check(i, e.value, e.tolerance);
      }
      break;
    case Collective::kReduce:
      if (rank_ != testCase.root) return;  // only the root's receive buffer is defined
      for (size_t i = 0; i < count; ++i) {
        Expectation e = reference.expected(inputs, i);
        check(i, e.value, e.tolerance);
      }
      break;
    case Collective::kAllGather:
      for (size_t peer = 0; peer < n; ++peer) {
        for (size_t i = 0; i < count; ++i) {
          check(peer * count + i, inputs.value(static_cast<int>(peer), i), 0);
        }
      }
      break;
    case Collective::kBroadcast:
      for (size_t i = 0; i < count; ++i) check(i, inputs.value(testCase.root, i), 0);
      break;
  }
  if (wrong > 0) {
    first.wrongElements = wrong;
    log.add(first);
  }
}

void CollectiveRankRunner::finish(const CollectiveCase& testCase, ncclComm_t comm, FailureLog& log) {
  if (!haveCreatedOp_) return;
  haveCreatedOp_ = false;
  ncclResult_t destroyResult = ncclRedOpDestroy(createdOp_, comm);
  if (destroyResult != ncclSuccess) {
    log.add(std::string("ncclRedOpDestroy after ") + collectiveName(testCase.collective) + " " +
            traitsOf(testCase.type).name + " returned " + resultName(destroyResult));
  }
}

void CollectiveRankRunner::run(const CollectiveCase& testCase, ncclComm_t comm, FailureLog& log) {
  for (int round = 0; round < roundsOf(testCase); ++round) {
    if (!prepare(testCase, round, comm, log)) break;
    ncclResult_t result = issue(testCase, comm);
    if (result != ncclSuccess) {
      Mismatch where = mismatchTemplate(testCase);
      log.add(where.collective + " type=" + where.type + " op=" + where.op + " count=" + std::to_string(where.count) +
              " inPlace=" + (where.inPlace ? "yes" : "no") + " rank " + std::to_string(rank_) + ": returned " +
              resultName(result));
      continue;
    }
    verify(testCase, round, log);
  }
  finish(testCase, comm, log);
}

}  // namespace chorus_test
