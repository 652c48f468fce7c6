#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "comm/comm.h"
#include "core/debug.h"
#include "core/env.h"

namespace chorus {
namespace {

// Tags of bootstrap messages exchanged while connecting.
constexpr int kRingTagBase = 0x1000;

PeerInfo localPeerInfo(const ncclComm* comm) {
  PeerInfo info{};
  info.rank = comm->rank;
  info.cudaDev = comm->cudaDev;
  info.pid = getpid();
  info.hostHash = localHostHash();
  struct stat st;
  info.shmDevId = stat("/dev/shm", &st) == 0 ? static_cast<uint64_t>(st.st_dev) : 0;
  // pid alone repeats across hosts; the host hash and a process-wide address make it unique.
  static const int processAnchor = 0;
  info.processId = info.hostHash ^ (static_cast<uint64_t>(info.pid) << 32) ^
                   reinterpret_cast<uintptr_t>(&processAnchor);
  gethostname(info.hostname, sizeof(info.hostname) - 1);
  return info;
}

size_t slotBytesFromEnv(const char* name, int64_t defaultBuffer) {
  int64_t buffer = envInt(name, defaultBuffer);
  if (buffer < kNcclSteps * 1024) {
    WARN("%s=%lld is too small; using %lld", name, static_cast<long long>(buffer),
         static_cast<long long>(defaultBuffer));
    buffer = defaultBuffer;
  }
  return static_cast<size_t>(buffer / kNcclSteps) / 64 * 64;  // whole cache lines per slot
}

// The receiving side of each ring connection is created first and its handle sent
// upstream; then each rank attaches to its downstream neighbour's receiver.
ncclResult_t connectRings(ncclComm* comm) {
  const PeerInfo& self = comm->peers[comm->rank];
  for (Channel& ch : comm->channels) {
    const int prev = ch.ringRanks[comm->nranks - 1];
    const Transport* t = selectTransport(self, comm->peers[prev]);
    if (!t) return ncclSystemError;
    ConnectHandle handle;
    CHORUS_CHECK(t->createReceiver(comm->ringSlotBytes, self, comm->peers[prev], &handle, &ch.ringRecv.end,
                                   &ch.ringRecv.resource));
    ch.ringRecv.transport = t;
    CHORUS_CHECK(comm->bootstrap->send(prev, kRingTagBase + ch.id, &handle, sizeof(handle)));
  }
  for (Channel& ch : comm->channels) {
    const int next = ch.ringRanks[1];
    ConnectHandle handle;
    CHORUS_CHECK(comm->bootstrap->recv(next, kRingTagBase + ch.id, &handle, sizeof(handle)));
    const Transport* t = transportById(handle.transport);
    if (!t) {
      WARN("Rank %d: rank %d answered with unknown transport %u", comm->rank, next,
           static_cast<unsigned>(handle.transport));
      return ncclInternalError;
    }
    CHORUS_CHECK(t->attachSender(handle, self, comm->peers[next], &ch.ringSend.end, &ch.ringSend.resource));
    ch.ringSend.transport = t;
    INFO(kSubsysInit | kSubsysP2p | kSubsysShm, "Channel %02d : %d[%d] -> %d[%d] via %s", ch.id, comm->rank,
         comm->cudaDev, next, comm->peers[next].cudaDev, t->name());
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t initCommunicator(ncclComm* comm, const ncclUniqueId& id) {
  const auto start = std::chrono::steady_clock::now();
  setLogRank(comm->rank);
  CHORUS_CHECK(Bootstrap::create(id, comm->rank, comm->nranks, &comm->abortFlag, &comm->bootstrap));

  comm->peers.resize(comm->nranks);
  comm->peers[comm->rank] = localPeerInfo(comm);
  CHORUS_CHECK(comm->bootstrap->allGather(comm->peers.data(), sizeof(PeerInfo)));
  // A communicator's identity: the id's bytes, the same on every rank.
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : id.internal) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  comm->commHash = h;

  comm->ringSlotBytes = slotBytesFromEnv("NCCL_BUFFSIZE", 4 << 20);
  comm->p2pSlotBytes = slotBytesFromEnv("CHORUS_P2P_BUFFSIZE", 1 << 20);
  const int nChannels = 1;
  comm->channels.resize(nChannels);
  for (int c = 0; c < nChannels; ++c) {
    Channel& ch = comm->channels[c];
    ch.id = c;
    ch.ringRanks.resize(comm->nranks);
    for (int k = 0; k < comm->nranks; ++k) ch.ringRanks[k] = (comm->rank + k) % comm->nranks;
  }
  comm->p2pSend.resize(comm->nranks);
  comm->p2pRecv.resize(comm->nranks);
  if (comm->nranks > 1) CHORUS_CHECK(connectRings(comm));
  comm->refreshView();
  comm->exec.abortFlag = &comm->abortFlag;
  comm->exec.rank = comm->rank;
  comm->exec.timeoutSec = static_cast<double>(envInt("CHORUS_TIMEOUT", 600));
  CHORUS_CHECK(comm->bootstrap->barrier());

  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  INFO(kSubsysInit, "comm %p rank %d nRanks %d nChannels %d pid %d - Init COMPLETE (%.1f ms)",
       static_cast<void*>(comm), comm->rank, comm->nranks, nChannels, getpid(), ms);
  return ncclSuccess;
}

}  // namespace chorus
