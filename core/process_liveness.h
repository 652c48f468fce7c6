// Whether a process of this host that shares memory with this one is alive, as the kernel
// says. Each such process holds an exclusive POSIX record lock on a file of its own in
// /dev/shm, named by its process id (PeerInfo::processId, unique per process); the kernel
// drops the lock when the process exits, before it is a zombie, a child made by fork() does
// not inherit it, and the name means the same in every PID namespace that shares /dev/shm. A peer that is merely slow
// keeps its lock, so it is never declared dead; one whose file is gone, or whose lock is free, has exited.
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

// How files in /dev/shm name the process that made them ("chorus-<tag>-..."): a process
// found dead at another's start has them removed (its FIFO segments too).
std::string processTag(uint64_t processId);

// Removes what processes that died without cleaning up left in /dev/shm: the liveness files
// whose lock is free (and older than a few seconds: a new process may not have locked its
// own yet), and their shared-memory FIFO segments.
void removeWhatDeadProcessesLeft();

// Creates this process's file and takes its lock, once per process (first removing what
// dead processes left in /dev/shm); later calls with the same id return the first answer,
// and a forked child (a new id) gets a file of its own. False (with a WARN naming the call and errno)
// when it cannot: peers then cannot tell whether this process lives and rely on their timeouts.
bool announceThisProcess(uint64_t processId);

// An open handle on the file of the process `processId` (close it with closePeerLiveness),
// or -1 when there is none: the process has not announced itself, or is gone.
int openPeerLiveness(uint64_t processId);
void closePeerLiveness(int fd);

// False once the process behind `fd` has exited (its lock is free); true while it holds it,
// or when `fd` is -1 (nothing to tell by). The dead process's file is removed.
bool peerAlive(int fd, uint64_t processId);

}  // namespace chorus
