// A rank's side of the root protocol (bootstrap_root.h serves the other): connect, answer the
// root's challenge with a proven report, read where the successor listens.
#pragma once

#include <string>

#include "core/socket.h"
#include "nccl.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {

// A root to report to: its address, its id's secret and the block of ranks it serves.
struct RootContact {
  SocketAddress address;
  uint64_t secret;
  RootBlock block;
  // NCCL_COMM_ID: the block's first rank starts the root, so it may not listen yet. A root
  // from ncclGetUniqueId listened before the id existed: refusing, it is gone.
  bool startedByRank = false;
};

// What the root said to one rank's report.
struct RootAnswer {
  SocketAddress successor;
  uint64_t successorNonce[2] = {0, 0};
};

// Proves `hello` to `root` and, with `answer`, waits for the root's answer (a successorOnly
// report gets none). On failure `*explained` says whether a WARN already gave the reason the
// caller's context cannot add to: the root is gone (an id used twice, say), or it refused the
// communicator because the ranks disagree (ncclInvalidUsage).
ncclResult_t reportToRoot(const RootContact& root, const RootHello& hello, const Deadline& deadline, RootAnswer* answer,
                          bool* explained);

}  // namespace chorus
