// The links between ranks that tests run over, and how a test forces one: P2P between
// threads of one process, SHM between processes, NET (the socket net through the proxy)
// between processes with P2P and SHM disabled.
#pragma once

#include "harness/rank_launcher.h"
#include "harness/scoped_env.h"

namespace chorus_test {

enum class Link { kP2p, kShm, kNet };

inline const char* linkName(Link link) { return link == Link::kP2p ? "P2p" : link == Link::kShm ? "Shm" : "Net"; }

// P2P needs ranks in one process; SHM and NET ranks are processes.
inline LaunchMode launchModeOf(Link link) { return link == Link::kP2p ? LaunchMode::kThreads : LaunchMode::kProcesses; }

// Set before the communicators are made (before the fork for processes).
inline void forceLink(ScopedEnv& env, Link link) {
  if (link != Link::kNet) return;
  env.set("NCCL_P2P_DISABLE", "1");
  env.set("NCCL_SHM_DISABLE", "1");
}

}  // namespace chorus_test
