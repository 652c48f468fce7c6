// The tuning model's view of a communicator: link figures from the transports its ring
// and tree use, hops priced per kind where only some cross the network, NCCL's GPU
// figures for a GPU communicator within a host, and whether its GPUs may use LL128.
#include "src/comm/comm_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/path_type.h"
#include "src/topo/topo_init.h"

namespace chorus {
namespace {

// Link figures of the CPU transports for the tuning model (src/tune/tune_constants.h says
// how they are calibrated). SHM: measured on 2 cores (BENCHMARKS.md): ~0.1 us per hand-off,
// 4 to 7 GB/s busbw for a large Simple ring. P2P (ranks of one process, often one thread
// driving several): not calibrated; a hand-off may wait for another fiber's turn.
constexpr double kShmBusBwGBs = 4.0;
constexpr double kShmHopLatencyUs = 0.1;
// SHM where a host runs more ranks than it has cores: a hop waits for its receiver to be
// scheduled on a shared core. Measured on 2 cores (BENCHMARKS.md, "The board when ranks
// outnumber cores"): an 8-byte ring AllReduce adds about 2 us per hop from 3 to 8 ranks.
// Priced so, the board's one hop wins up to its 4 KiB, where it measured 0.3-0.6x the ring.
constexpr double kShmScheduledHopLatencyUs = 2.0;
constexpr double kP2pBusBwGBs = 4.0;
constexpr double kP2pHopLatencyUs = 2.0;
// NET: the socket net over loopback TCP, 2 cores (BENCHMARKS.md, "The tuner over the
// network"): an 8-byte AllReduce takes 32 to 37 us per hop (4 ranks: tree 127 us over 4
// hops, ring 220 us over 6), and 2 ranks reach 1.6 to 1.9 GB/s busbw from 1 MiB; with these
// the tree/ring crossover at 4 ranks falls between 32 and 64 KiB, where it was measured
// (the two are within 5 % at 64 KiB). A real network differs per hop and per byte; IB is
// not calibrated.
constexpr double kNetBusBwGBs = 1.6;
constexpr double kNetHopLatencyUs = 35.0;

// Which of the communicator's hops go through the network (NET), for the tuning model.
struct NetworkHops {
  bool any = false;      // some ring or tree connection does: a hop is priced as a network hop
  double ringShare = 0;  // of channel 0's ring hops
  int treeNetHops = 0;   // of channel 0's tree's hops from the root to the deepest rank, the most
  // Some host runs more of the ranks than it has cores: a hop between its ranks then waits
  // for the receiver to be scheduled, which after a wait on the network (asleep) costs as
  // much as a network hop, so every hop is priced as one (measured with 4 ranks over two
  // "hosts" on 2 cores, BENCHMARKS.md "The tuner across hosts"); over shared memory alone,
  // as kShmScheduledHopLatencyUs.
  bool oversubscribed = false;
  // Why a GPU communicator must not use LL128 (TuneTopology::ll128Hazard); null: it may.
  const char* ll128Hazard = nullptr;
};

// Compute capabilities on which NCCL 2.28 enables LL128 by default (major * 10 + minor).
constexpr int kLl128Archs[] = {70, 80, 90, 100, 120};

// LL128 on a GPU (device/common/ll128_primitives.h) needs each warp's 128-byte line to
// arrive whole at the reader, which NCCL trusts NVLink and a GPU's own memory with. So, as
// NCCL decides: every FIFO between this rank's GPU and another GPU of its host is in GPU
// memory over NVLink (or on the same GPU); the NIC its network connections leave by is
// within PXB of it (NCCL's rule; a proxied FIFO itself is read after its tail). Null when
// that holds; else why not, and `*peer`, the rank whose connection to this one fails it.
const char* localLl128Hazard(const ncclComm* comm, int* peer) {
  const PeerInfo& self = comm->peers[comm->rank];
  *peer = -1;
  if (!self.gpuComm) return nullptr;
  for (const PeerInfo& p : comm->peers) {
    if (p.rank == comm->rank) continue;
    *peer = p.rank;
    if (p.hostHash != self.hostHash) {
      if (!comm->nearNicPaths.empty() && comm->nearNicPaths.front() > static_cast<int>(PathType::PXB))
        return "the NIC nearest the GPU is farther than PXB";
      continue;
    }
    const LinkContext link = p.rank < static_cast<int>(comm->gpuLinks.size()) ? comm->gpuLinks[p.rank] : LinkContext{};
    std::string why;
    if (!receiverGpuBuffersAllowed(self, p, link, &why)) return "a FIFO between GPUs of one host is in host memory";
    if (link.gpuPath > static_cast<int>(PathType::NVL)) return "two GPUs of one host are not linked by NVLink";
  }
  *peer = -1;
  return nullptr;
}

// Whether every GPU communicator rank's GPU has one compute capability NCCL runs LL128 on.
const char* archLl128Hazard(const std::vector<PeerInfo>& peers) {
  int arch = -1;
  for (const PeerInfo& p : peers) {
    if (!p.gpuComm) continue;
    if (arch >= 0 && p.gpuArch != arch) return "the GPUs' compute capabilities differ";
    arch = p.gpuArch;
  }
  if (arch < 0) return nullptr;  // a CPU communicator: its lines are ordered by release and acquire
  for (int supported : kLl128Archs)
    if (arch == supported) return nullptr;
  return "the GPUs' compute capability is not one NCCL runs LL128 on (7.0, 8.0, 9.0, 10.0, 12.0)";
}

// All-gathered, so every rank prices calls alike (each knows only its own connections, and
// the receiver of each chose its transport): whether any of a rank's connections, its ring
// send and its tree link to its parent on channel 0 are NET, and that parent.
ncclResult_t networkHops(ncclComm* comm, NetworkHops* out) {
  enum : int32_t { kAny = 1, kRingSend = 2, kTreeUp = 4, kOversubscribed = 8, kLl128Hazard = 16 };
  struct Report {
    int32_t flags;
    int32_t parent;
  };
  std::vector<Report> reports(comm->nranks, Report{0, -1});
  Report& mine = reports[comm->rank];
  auto isNet = [](const Connection& c) { return c.used().connected() && c.used().transport->id() == TransportId::Net; };
  auto overNet = [&](const std::vector<Connection>& side, int peer) {
    return peer >= 0 && peer < static_cast<int>(side.size()) && isNet(side[peer]);
  };
  for (Channel& ch : comm->channels)
    ch.forEachConnection([&](const Connection& c) { mine.flags |= isNet(c) ? kAny : 0; });
  // By machine name, not host identity: NCCL_HOSTID may split one machine's cores into "hosts".
  const char* machine = comm->peers[comm->rank].hostname;
  const long ranksHere = std::count_if(comm->peers.begin(), comm->peers.end(), [machine](const PeerInfo& p) {
    return strncmp(p.hostname, machine, sizeof(p.hostname)) == 0;
  });
  if (ranksHere > sysconf(_SC_NPROCESSORS_ONLN)) mine.flags |= kOversubscribed;
  if (!comm->channels.empty()) {
    const Channel& ch = comm->channels.front();
    if (comm->nranks > 1 && overNet(ch.send, ch.ringRanks[1])) mine.flags |= kRingSend;
    mine.parent = ch.tree.parent;
    if (overNet(ch.send, ch.tree.parent) || overNet(ch.recv, ch.tree.parent)) mine.flags |= kTreeUp;
  }
  int hazardPeer = -1;
  if (const char* hazard = localLl128Hazard(comm, &hazardPeer)) {
    mine.flags |= kLl128Hazard;
    INFO(kSubsysTuning, "LL128 is not used on this communicator: %s (rank %d and rank %d)", hazard, comm->rank,
         hazardPeer);
  }
  CHORUS_CHECK(comm->bootstrap->allGather(reports.data(), sizeof(Report)));
  out->ll128Hazard = archLl128Hazard(comm->peers);
  int ringNet = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    out->any = out->any || (reports[r].flags & kAny) != 0;
    out->oversubscribed = out->oversubscribed || (reports[r].flags & kOversubscribed) != 0;
    if ((reports[r].flags & kLl128Hazard) != 0 && out->ll128Hazard == nullptr)
      out->ll128Hazard = "a GPU's connections may deliver a 128-byte line in pieces (not NVLink, or a far NIC)";
    ringNet += (reports[r].flags & kRingSend) != 0;
    int crossings = 0;  // on r's path to the root (at most nranks steps: a malformed report cannot loop)
    for (int at = r, steps = 0; at >= 0 && at < comm->nranks && reports[at].parent >= 0 && steps < comm->nranks;
         at = reports[at].parent, ++steps)
      crossings += (reports[at].flags & kTreeUp) != 0;
    out->treeNetHops = std::max(out->treeNetHops, crossings);
  }
  out->ringShare = static_cast<double>(ringNet) / comm->nranks;
  return ncclSuccess;
}

// A GPU communicator prices calls with NCCL's GPU figures (tune_constants.h) where every
// rank's GPU is placed in its host's topology. Within a host each channel moves at most
// kGpuChannelGBs, and the narrowest hop of any rank's host ring is shared among the
// channels. Across hosts a network hop costs NCCL's network latency and the channels share
// the slowest rank's NIC; a topology without NICs keeps the CPU calibration's figures.
void gpuTuning(const ncclComm* comm, const NetworkHops& hops, bool placed, TuneTopology* topo,
               TuneConstants* constants) {
  if (!placed) return;
  double hopGBs = 0;
  double nicGBs = 0;
  bool nvlink = true;
  for (const PeerInfo& p : comm->peers) {
    if (p.ringHopGBs > 0) hopGBs = hopGBs == 0 ? p.ringHopGBs : std::min<double>(hopGBs, p.ringHopGBs);
    if (p.nicGBs > 0) nicGBs = nicGBs == 0 ? p.nicGBs : std::min<double>(nicGBs, p.nicGBs);
    nvlink = nvlink && p.ringOverNvlink != 0;
  }
  const double channels = static_cast<double>(comm->channels.size());
  const double channelGBs =
      hopGBs > 0 ? std::min<double>(topo::kGpuChannelGBs, hopGBs / channels) : topo::kGpuChannelGBs;
  if (!hops.any) {
    topo->busBwGBs = channelGBs;
    topo->hopLatencyUs = nvlink ? kGpuNvlinkHopUs : kGpuPciHopUs;
    *constants = gpuTuneConstants(nvlink);
    return;
  }
  if (nicGBs <= 0) return;
  topo->busBwGBs = std::min(channelGBs, nicGBs / channels);
  topo->hopLatencyUs = kGpuNetHopUs;
  topo->localHopLatencyUs = nvlink ? kGpuNvlinkHopUs : kGpuPciHopUs;  // a kernel spins: no wake-up to pay
  topo->ringNetHopShare = hops.ringShare;
  topo->treeNetHops = hops.treeNetHops;
  *constants = gpuNetTuneConstants(nvlink);
}

// What the tuning model needs, from information every rank shares (so every rank
// makes the same choice for the same call).
TuneTopology tuneTopology(const ncclComm* comm, const NetworkHops& hops, int treeDepth, int nHosts, bool placed,
                          TuneConstants* constants) {
  const bool overNetwork = hops.any;
  TuneTopology topo;
  topo.nranks = comm->nranks;
  std::set<uint64_t> processes;
  for (const PeerInfo& p : comm->peers) processes.insert(p.processId);
  topo.nHosts = nHosts;
  topo.treeDepth = treeDepth;
  topo.ll128Hazard = hops.ll128Hazard;
  topo.nChannels = static_cast<int>(comm->channels.size());
  // Both transports are memory copies; across processes a hand-off crosses cores (cache
  // line transfers), within one process the ranks take turns on one thread.
  const bool crossProcess = processes.size() > 1;
  topo.busBwGBs = overNetwork ? kNetBusBwGBs : crossProcess ? kShmBusBwGBs : kP2pBusBwGBs;
  const double shmHopUs = hops.oversubscribed ? kShmScheduledHopLatencyUs : kShmHopLatencyUs;
  topo.hopLatencyUs = overNetwork ? kNetHopLatencyUs : crossProcess ? shmHopUs : kP2pHopLatencyUs;
  if (overNetwork && !hops.oversubscribed) {
    // The hops that stay on a host cost a memory hop's latency (the bandwidth stays the
    // network's: the slowest hop paces a pipeline).
    topo.localHopLatencyUs = crossProcess ? kShmHopLatencyUs : kP2pHopLatencyUs;
    topo.ringNetHopShare = hops.ringShare;
    topo.treeNetHops = hops.treeNetHops;
  }
  gpuTuning(comm, hops, placed, &topo, constants);
  return topo;
}

}  // namespace

ncclResult_t commTuneTopology(ncclComm* comm, int treeDepth, int nHosts, bool placed, TuneTopology* topo,
                              TuneConstants* constants) {
  NetworkHops hops;
  CHORUS_CHECK(networkHops(comm, &hops));
  *topo = tuneTopology(comm, hops, treeDepth, nHosts, placed, constants);
  return ncclSuccess;
}

}  // namespace chorus
