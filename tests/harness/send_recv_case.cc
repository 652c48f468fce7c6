#include "harness/send_recv_case.h"

#include <algorithm>
#include <string>
#include <vector>

#include "harness/byte_pattern.h"
#include "harness/datatypes.h"

namespace chorus_test {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0x5A;

// One rank's side of an exchange: buffers, then the checks after the group ran.
class SendRecvRank {
 public:
  SendRecvRank(const SendRecvCase& testCase, int rank, int nranks)
      : case_(testCase),
        rank_(rank),
        bytes_(testCase.count * traitsOf(testCase.type).size),
        to_((rank + testCase.shift) % nranks),
        from_(((rank - testCase.shift) % nranks + nranks) % nranks),
        send_(std::max<size_t>(bytes_, 1)),
        recv_(bytes_ + 2 * kGuardBytes, kGuardByte) {
    fillPattern(send_.data(), bytes_, patternKey(case_.seed, rank_, to_));
    sendCopy_ = send_;
  }

  std::string where() const {
    return "SendRecv type=" + std::string(traitsOf(case_.type).name) + " count=" + std::to_string(case_.count) +
           " shift=" + std::to_string(case_.shift) + " rank " + std::to_string(rank_) + " (to " + std::to_string(to_) +
           ", from " + std::to_string(from_) + "): ";
  }

  // ncclSend then ncclRecv; false (logged) when either fails.
  bool issue(ncclComm_t comm, FailureLog& log) {
    const ncclResult_t sent = ncclSend(send_.data(), case_.count, case_.type, to_, comm, nullptr);
    const ncclResult_t received = ncclRecv(recv_.data() + kGuardBytes, case_.count, case_.type, from_, comm, nullptr);
    if (sent == ncclSuccess && received == ncclSuccess) return true;
    log.add(where() + "Send " + resultName(sent) + ", Recv " + resultName(received));
    return false;
  }

  void verify(FailureLog& log) const {
    const uint64_t key = patternKey(case_.seed, from_, rank_);
    if (std::optional<size_t> bad = findPatternMismatch(recv_.data() + kGuardBytes, bytes_, key)) {
      log.add(where() + "received byte " + std::to_string(*bad) + " of " + std::to_string(bytes_) + " is " +
              std::to_string(recv_[kGuardBytes + *bad]) + ", expected " + std::to_string(patternByte(key, *bad)));
    }
    auto isGuard = [](unsigned char b) { return b == kGuardByte; };
    if (!std::all_of(recv_.begin(), recv_.begin() + kGuardBytes, isGuard) ||
        !std::all_of(recv_.end() - kGuardBytes, recv_.end(), isGuard)) {
      log.add(where() + "wrote outside the receive buffer (guard bytes changed)");
    }
    if (send_ != sendCopy_) log.add(where() + "modified the send buffer");
  }

 private:
  SendRecvCase case_;
  int rank_;
  size_t bytes_;
  int to_;
  int from_;
  std::vector<unsigned char> send_, sendCopy_, recv_;
};

}  // namespace

void runSendRecvCase(const SendRecvCase& testCase, ncclComm_t comm, int rank, int nranks, FailureLog& log) {
  SendRecvRank side(testCase, rank, nranks);
  const ncclResult_t start = ncclGroupStart();
  const bool issued = side.issue(comm, log);
  const ncclResult_t end = ncclGroupEnd();
  if (start != ncclSuccess || end != ncclSuccess) {
    log.add(side.where() + "GroupStart " + resultName(start) + ", GroupEnd " + resultName(end));
    return;
  }
  if (issued) side.verify(log);
}

void runSendRecvCaseAllRanks(const SendRecvCase& testCase, std::span<const ncclComm_t> comms,
                             std::span<FailureLog> logs) {
  const int nranks = static_cast<int>(comms.size());
  std::vector<SendRecvRank> sides;
  for (int rank = 0; rank < nranks; ++rank) sides.emplace_back(testCase, rank, nranks);
  const ncclResult_t start = ncclGroupStart();
  std::vector<bool> issued(nranks);
  for (int rank = 0; rank < nranks; ++rank) issued[rank] = sides[rank].issue(comms[rank], logs[rank]);
  const ncclResult_t end = ncclGroupEnd();
  for (int rank = 0; rank < nranks; ++rank) {
    if (start != ncclSuccess || end != ncclSuccess) {
      logs[rank].add(sides[rank].where() + "GroupStart " + resultName(start) + ", GroupEnd " + resultName(end));
    } else if (issued[rank]) {
      sides[rank].verify(logs[rank]);
    }
  }
}

}  // namespace chorus_test
