#include "harness/unaligned_case.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/failure_log.h"

namespace chorus_test {

namespace {

uint8_t unalignedValue(uint64_t call, int rank, size_t i) {
  return static_cast<uint8_t>((i * 13 + static_cast<size_t>(rank) * 7 + call * 5) % 16);  // 8 ranks sum < 256
}

}  // namespace

RankOutcome runUnalignedCalls(const RankContext& ctx, size_t payload, bool onlyAllReduce) {
  FailureLog log;
  const int n = ctx.nranks, rank = ctx.rank;
  const size_t sendOffset = 1 + rank % 7, recvOffset = 1 + (rank + 3) % 7;
  std::vector<size_t> counts = {1, 7, 13, 61, payload - 1, payload + 1, 3 * payload + 5, 8 * payload + 1};
  enum Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSendRecv };
  static const char* const kOpNames[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "SendRecv"};
  const int lastOp = onlyAllReduce ? kAllReduce : kSendRecv;
  uint64_t call = 0;
  for (int op = kAllReduce; op <= lastOp; ++op) {
    for (size_t count : counts) {
      ++call;
      const size_t sendCount = op == kReduceScatter ? count * n : count;
      const size_t recvCount = op == kAllGather ? count * n : count;
      std::vector<uint8_t> sendStorage(sendCount + 16), recvStorage(recvCount + 16, 0xEE);
      uint8_t* send = sendStorage.data() + sendOffset;
      uint8_t* recv = recvStorage.data() + recvOffset;
      for (size_t i = 0; i < sendCount; ++i) send[i] = unalignedValue(call, rank, i);
      const int root = static_cast<int>(call % n);
      const int to = (rank + 1) % n, from = (rank + n - 1) % n;
      ncclResult_t r = ncclSuccess;
      switch (op) {
        case kAllReduce:
          r = ncclAllReduce(send, recv, count, ncclUint8, ncclSum, ctx.comm, nullptr);
          break;
        case kReduceScatter:
          r = ncclReduceScatter(send, recv, count, ncclUint8, ncclSum, ctx.comm, nullptr);
          break;
        case kAllGather:
          r = ncclAllGather(send, recv, count, ncclUint8, ctx.comm, nullptr);
          break;
        case kBroadcast:
          r = ncclBroadcast(send, recv, count, ncclUint8, root, ctx.comm, nullptr);
          break;
        case kReduce:
          r = ncclReduce(send, recv, count, ncclUint8, ncclSum, root, ctx.comm, nullptr);
          break;
        default:
          ncclGroupStart();
          ncclSend(send, count, ncclUint8, to, ctx.comm, nullptr);
          ncclRecv(recv, count, ncclUint8, from, ctx.comm, nullptr);
          r = ncclGroupEnd();
      }
      const std::string where = std::string(kOpNames[op]) + " count " + std::to_string(count) + " rank " +
                                std::to_string(rank) + " (send offset " + std::to_string(sendOffset) +
                                ", recv offset " + std::to_string(recvOffset) + "): ";
      if (r != ncclSuccess) {
        log.add(where + "returned " + resultName(r));
        return log.outcome();  // the communicator may be unusable
      }
      auto sumAt = [&](size_t index) {
        unsigned total = 0;
        for (int p = 0; p < n; ++p) total += unalignedValue(call, p, index);
        return total;
      };
      size_t wrong = 0, first = 0;
      auto check = [&](size_t i, unsigned want) {
        if (recv[i] != want && wrong++ == 0) first = i;
      };
      for (size_t i = 0; i < recvCount; ++i) {
        if (op == kAllReduce || (op == kReduce && rank == root)) check(i, sumAt(i));
        if (op == kReduceScatter) check(i, sumAt(rank * count + i));
        if (op == kAllGather) check(i, unalignedValue(call, static_cast<int>(i / count), i % count));
        if (op == kBroadcast) check(i, unalignedValue(call, root, i));
        if (op == kSendRecv) check(i, unalignedValue(call, from, i));
      }
      if (wrong > 0) log.add(where + std::to_string(wrong) + " wrong bytes, first at " + std::to_string(first));
      const bool guardsOk =
          std::all_of(recvStorage.begin(), recvStorage.begin() + recvOffset, [](uint8_t b) { return b == 0xEE; }) &&
          std::all_of(recvStorage.begin() + recvOffset + recvCount, recvStorage.end(),
                      [](uint8_t b) { return b == 0xEE; });
      if (!guardsOk && !(op == kReduce && rank != root)) log.add(where + "wrote outside the receive buffer");
    }
  }
  return log.outcome();
}

}  // namespace chorus_test
