// The bootstrap root: collects the listening address of every rank of its block (all
// ranks, unless ncclCommInitRankScalable spread them over several roots) and answers each
// with its successor's, then ends. The successor of the block's last rank is the next
// block's first rank, which reports to this root for that alone. Connections that do not
// present the secret, or present an inconsistent report, are dropped and the root keeps
// serving. A root no rank ever reached ends quietly at the timeout (an unused id).
#pragma once

#include <cstdint>

#include "core/socket.h"
#include "nccl.h"

namespace chorus {

// Serves the root protocol on `listener` in a detached thread, which ends (closing its
// sockets) once all ranks are answered or CHORUS_BOOTSTRAP_TIMEOUT seconds (read here,
// on the calling thread) pass.
ncclResult_t startBootstrapRoot(Socket listener, uint64_t secret);

// Serves the root protocol on the calling thread (what the detached thread runs).
ncclResult_t runBootstrapRoot(Socket listener, uint64_t secret, int timeoutSeconds);

}  // namespace chorus
