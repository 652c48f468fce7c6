// The bootstrap root: collects every rank's listening address and answers each rank
// with its successor's, then ends. Connections that do not present the secret, or
// present an inconsistent report, are dropped and the root keeps serving.
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
