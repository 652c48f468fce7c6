// One send/recv exchange checked byte for byte: every rank sends `count` elements
// to rank + shift and receives as many from rank - shift, in one group. Data is
// a byte pattern keyed by (seed, sender, receiver), so misplaced, stale or
// truncated bytes are caught; guard bytes around the receive buffer catch
// writes past it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "harness/failure_log.h"
#include "nccl.h"

namespace chorus_test {

struct SendRecvCase {
  ncclDataType_t type = ncclUint8;
  size_t count = 0;  // elements
  int shift = 1;     // 0: a send to self
  uint64_t seed = 0;
};

// Runs the exchange on this rank (every rank must call it with the same case).
void runSendRecvCase(const SendRecvCase& testCase, ncclComm_t comm, int rank, int nranks, FailureLog& log);

// Runs the exchange for every rank from one thread, in one group (ncclCommInitAll's
// communicators); logs[rank] collects each rank's failures.
void runSendRecvCaseAllRanks(const SendRecvCase& testCase, std::span<const ncclComm_t> comms,
                             std::span<FailureLog> logs);

}  // namespace chorus_test
