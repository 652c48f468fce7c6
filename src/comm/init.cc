#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "core/debug.h"
#include "core/env.h"
#include "core/process_liveness.h"
#include "core/settings.h"
#include "src/comm/board_setup.h"
#include "src/comm/comm.h"
#include "src/comm/comm_tuning.h"
#include "src/comm/connect.h"
#include "src/comm/shared_connections.h"
#include "src/executor/cuda/cuda_executor.h"
#include "src/executor/executor_choice.h"
#include "src/profiler/profiler.h"
#include "src/report/hang_report.h"
#include "src/topo/topo_init.h"
#include "src/tune/tuner_plugin.h"
#include "transport/net/net_choice.h"

namespace chorus {
namespace {

// Tags of bootstrap messages exchanged while connecting.
constexpr int kChannelTagBase = 0x1000;
constexpr int kMaxChannels = 32;
PeerInfo localPeerInfo(const ncclComm* comm) {
  PeerInfo info{};
  info.rank = comm->rank;
  info.cudaDev = comm->cudaDev;
  info.gpuBusId = gpuBusIdOf(comm->cudaDev);
  info.pid = getpid();
  info.trafficClass = comm->config.trafficClass;
  info.deterministic = comm->deterministic ? 1 : 0;
  info.gpuComm = comm->executorChoice.load() == ExecutorChoice::Cuda ? 1 : 0;
  info.gpuLanes = info.gpuComm ? gpuResidentLanes(comm->cudaDev) : 0;
  info.gpuArch = info.gpuComm ? gpuComputeCapability(comm->cudaDev) : 0;
  info.ringPosition = -1;  // set from the topology once the host's ranks are known
  info.topoGpu = -1;
  info.lenderRank = comm->lender != nullptr ? comm->lender->rank : -1;
  info.boardWanted = boardWanted(info) ? 1 : 0;
  snprintf(info.netName, sizeof(info.netName), "%s", comm->config.netName.c_str());
  // A net asked for by name must be usable at init, as NCCL's net init checks, even when no
  // connection will need it (one host). Only then is it chosen this early.
  const bool netAsked = !comm->config.netName.empty() || !envValue("NCCL_NET").value_or("").empty();
  info.netMissing = netAsked && netNamed(comm->config.netName) == nullptr ? 1 : 0;
  info.hostHash = localHostHash();
  struct stat st;
  info.shmDevId = stat("/dev/shm", &st) == 0 ? static_cast<uint64_t>(st.st_dev) : 0;
  // pid alone repeats across hosts; the host hash and a process-wide address make it unique.
  static const int processAnchor = 0;
  info.processId =
      info.hostHash ^ (static_cast<uint64_t>(info.pid) << 32) ^ reinterpret_cast<uintptr_t>(&processAnchor);
  // Before the peers learn of this process: they watch its liveness file from then on.
  announceThisProcess(info.processId);
  gethostname(info.hostname, sizeof(info.hostname) - 1);
  return info;
}

// A rank whose named net is missing fails the init on every rank alike (the peers would
// otherwise wait for it in the set-up's next exchange).
ncclResult_t checkNamedNetsUsable(const ncclComm* comm) {
  ncclResult_t result = ncclSuccess;
  for (const PeerInfo& p : comm->peers) {
    if (!p.netMissing) continue;
    WARN(
        "init: rank %d asked for a net that is not usable (config->netName \"%s\", or NCCL_NET when empty); see "
        "its WARN",
        p.rank, p.netName);
    result = ncclInvalidUsage;
  }
  return result;
}

// Deterministic mode changes which steps a reduction takes, so every rank must be in it or
// none: the ranks that differ from rank 0 are named, and init fails on every rank alike.
ncclResult_t checkDeterministicAgreed(const ncclComm* comm) {
  const int expected = comm->peers[0].deterministic;
  for (const PeerInfo& p : comm->peers) {
    if (p.deterministic == expected) continue;
    WARN("CHORUS_DETERMINISTIC differs between ranks: rank 0 has %d, rank %d has %d; set it alike on every rank",
         expected, p.rank, p.deterministic);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

// Bytes of one slot: a whole number of the protocol's lines, from a buffer setting, at
// most kMaxSlotBytes (FifoLayout::plausible, which the peers check).
size_t slotBytesFromEnv(const char* name, int64_t defaultBuffer, int nSlots, Protocol proto) {
  const size_t line = kSlotLineBytes[static_cast<int>(proto)];
  int64_t buffer = envInt(name, defaultBuffer);
  if (buffer < static_cast<int64_t>(nSlots * line)) {
    WARN("%s=%lld is smaller than %d slots of one %zu-byte line; using %lld", name, static_cast<long long>(buffer),
         nSlots, line, static_cast<long long>(defaultBuffer));
    buffer = defaultBuffer;
  }
  if (static_cast<uint64_t>(buffer) / nSlots > kMaxSlotBytes) {
    WARN("%s=%lld makes slots larger than %zu bytes; using %zu", name, static_cast<long long>(buffer), kMaxSlotBytes,
         kMaxSlotBytes * nSlots);
    buffer = static_cast<int64_t>(kMaxSlotBytes * nSlots);
  }
  // Round down to whole lines: an LL128 slot that is not a multiple of its line would hang (NCCL does).
  return static_cast<size_t>(buffer) / nSlots / line * line;
}

int slotCountFromEnv() {
  const int64_t steps = envInt("NCCL_STEPS", kNcclSteps);
  if (!validSlotCount(steps)) {
    WARN("NCCL_STEPS=%lld must be a power of two from 2 to %d; using %d", static_cast<long long>(steps), kMaxSteps,
         kNcclSteps);
    return kNcclSteps;
  }
  return static_cast<int>(steps);
}

// NCCL_MIN/MAX_NCHANNELS bound a rank's wish for channels; the config's minCTAs/maxCTAs,
// where set, bound it instead.
int boundChannels(int wanted, const CommConfig& config) {
  const int minChannels = config.minChannels > 0
                              ? config.minChannels
                              : static_cast<int>(envIntInRange("NCCL_MIN_NCHANNELS", 1, 0, INT32_MAX));
  const int maxChannels = config.maxChannels > 0
                              ? config.maxChannels
                              : static_cast<int>(envIntInRange("NCCL_MAX_NCHANNELS", kMaxChannels, 1, INT32_MAX));
  wanted = std::min(wanted, std::max(1, maxChannels));
  wanted = std::max(wanted, std::min(std::max(1, minChannels), kMaxChannels));
  return std::min(wanted, kMaxChannels);
}

// The channels a CPU communicator's rank can serve: a channel is a lane on the rank's
// thread, so more channels than cores per local rank only add hand-offs. A GPU
// communicator's come from its GPU's links instead (topo::GpuRoute::channels).
int cpuChannelsWanted(int localRanks, const CommConfig& config) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return boundChannels(static_cast<int>(std::max(1L, cores / std::max(1, localRanks))), config);
}

// A GPU communicator's channels: what its GPU's links carry (topo::GpuRoute::channels),
// within the settings, and no more than its kernels may have lanes (every lane's block must
// be resident at once).
int gpuChannelsWanted(const ncclComm* comm, int linkChannels) {
  const int wanted = boundChannels(linkChannels, comm->config);
  if (comm->kernelLanes <= 0 || wanted <= comm->kernelLanes) return wanted;
  INFO(kSubsysInit | kSubsysGraph,
       "rank %d: %d channels wanted, but its GPU runs only %d of this communicator's thread blocks at once: %d "
       "channels",
       comm->rank, wanted, comm->kernelLanes, comm->kernelLanes);
  return comm->kernelLanes;
}

// Whether every rank is a GPU communicator whose GPU has a place in its host's searched
// ring (topo::GpuRoute): then the communicator routes and prices by the topology.
bool everyRankPlaced(const std::vector<PeerInfo>& peers) {
  return std::all_of(peers.begin(), peers.end(), [](const PeerInfo& p) { return p.gpuComm && p.ringPosition >= 0; });
}

// The ring every channel follows, the same on every rank (all-gathered information only).
// When every rank is a GPU communicator placed in its host's topology, each host's ranks
// follow the topology search's ring order, hosts in the order of their first rank, as
// NCCL's rings follow its graph search; otherwise (CPU communicators, a GPU the topology
// lacks, `byRank`: deterministic mode, which promises rank order) ranks in order.
std::vector<int> ringOrder(const std::vector<PeerInfo>& peers, bool byRank) {
  std::vector<int> order(peers.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  if (byRank || !everyRankPlaced(peers)) return order;
  std::vector<uint64_t> hosts;  // by first rank
  for (const PeerInfo& p : peers)
    if (std::find(hosts.begin(), hosts.end(), p.hostHash) == hosts.end()) hosts.push_back(p.hostHash);
  auto place = [&](int r) {
    const auto host = std::find(hosts.begin(), hosts.end(), peers[r].hostHash) - hosts.begin();
    return std::pair<long, int>(host, peers[r].ringPosition);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return place(a) < place(b); });
  return order;
}

// " (NVL)": the GPUs' path, for a connection's INFO line; "" where unknown.
std::string pathNote(const ncclComm* comm, int peer) {
  if (comm->gpuLinks.empty() || comm->gpuLinks[peer].gpuPath < 0) return "";
  return std::string(" (") + pathTypeName(static_cast<PathType>(comm->gpuLinks[peer].gpuPath)) + ")";
}

// Where this communicator shares its lender's connections (comm->sharedConns set up
// below): the lender's connection to (`side` &Channel::send) or from (&Channel::recv) `peer`
// on channel `c`, if it has one; else null, and this rank makes its own.
Connection* lenderConnection(ncclComm* comm, int c, int peer, std::vector<Connection> Channel::*side) {
  if (comm->lender == nullptr) return nullptr;
  const int lenderPeer = comm->peers[peer].lenderRank;
  if (c >= static_cast<int>(comm->lender->channels.size()) || lenderPeer < 0) return nullptr;
  Connection& conn = (comm->lender->channels[c].*side)[lenderPeer];
  return conn.used().connected() ? &conn : nullptr;
}

// splitShare/shrinkShare: whether this rank's connections may be shared with those of the
// communicator it is made from. Only where every rank asks (the ends must decide alike) and
// the communicators are CPU ones. Then it joins the lender's family, takes the lender's
// FIFO layout, and tags its calls (call_stamp.h) with a number of its own, the same on every rank.
void decideSharing(ncclComm* comm, uint64_t commHash) {
  if (comm->lender == nullptr) return;
  const bool everyRankAsks = std::all_of(comm->peers.begin(), comm->peers.end(),
                                         [](const PeerInfo& p) { return p.lenderRank >= 0 && p.gpuComm == 0; });
  if (!everyRankAsks || comm->nranks < 2) {
    INFO(kSubsysInit, "rank %d: connections not shared with the parent communicator: %s", comm->rank,
         comm->nranks < 2 ? "one rank" : "not every rank asks for it (splitShare/shrinkShare), or a GPU communicator");
    comm->lender = nullptr;
    return;
  }
  SharedConnections::join(comm, comm->lender);
  comm->collLayout = comm->lender->collLayout;
  comm->stampTag = (commHash % ((uint64_t{1} << (64 - kStampTagShift)) - 1) + 1) << kStampTagShift;
}

// Connects one channel to its ring and tree neighbours. Receivers are created and
// their handles sent upstream first; then each sender attaches to its peer's receiver.
ncclResult_t connectChannel(ncclComm* comm, Channel& ch) {
  std::set<int> recvFrom = {ch.ringRanks[comm->nranks - 1]};
  std::set<int> sendTo = {ch.ringRanks[1]};
  std::vector<int> treePeers(ch.tree.children, ch.tree.children + ch.tree.nChildren);
  if (ch.tree.parent >= 0) treePeers.push_back(ch.tree.parent);
  for (int peer : treePeers) {
    recvFrom.insert(peer);
    sendTo.insert(peer);
  }
  const int tag = kChannelTagBase + ch.id;
  for (int peer : recvFrom) {
    if (Connection* lent = lenderConnection(comm, ch.id, peer, &Channel::recv))
      CHORUS_CHECK(borrowReceiver(comm, peer, tag, *lent, &ch.recv[peer]));
    else
      CHORUS_CHECK(createReceiverFor(comm, peer, comm->collLayout, tag, &ch.recv[peer], ConnectionUse::kChannel));
  }
  for (int peer : sendTo) {
    Connection* lent = lenderConnection(comm, ch.id, peer, &Channel::send);
    if (lent != nullptr)
      CHORUS_CHECK(borrowSender(comm, peer, tag, *lent, &ch.send[peer]));
    else
      CHORUS_CHECK(attachSenderTo(comm, peer, tag, &ch.send[peer], ConnectionUse::kChannel));
    const Connection& used = ch.send[peer].used();
    const std::string where = used.resource ? used.resource->describe() : "";
    INFO(kSubsysInit | kSubsysP2p | kSubsysShm, "Channel %02d : %d[%d] -> %d[%d] via %s%s%s%s%s", ch.id, comm->rank,
         comm->cudaDev, peer, comm->peers[peer].cudaDev, used.transport->name(), where.empty() ? "" : "/",
         where.c_str(), pathNote(comm, peer).c_str(), lent != nullptr ? " (shared with the parent communicator)" : "");
  }
  return ncclSuccess;
}

// Which of its host topology's GPUs this rank's GPU can write (PeerInfo::gpuReach): each
// found in this process by its PCI location (where this process knows none, by the
// topology's device number) and asked of the CUDA backend.
uint64_t gpuReachOf(const ncclComm* comm, const topo::GpuRoute& route) {
  const GpuFifoMemory* memory = gpuFifoMemory();
  if (memory == nullptr) return 0;
  const bool byLocation = comm->peers[comm->rank].gpuBusId != 0;
  uint64_t reach = 0;
  for (size_t i = 0; i < route.gpuDevs.size() && i < 64; ++i) {
    const int device = byLocation ? gpuOrdinalOf(route.gpuBusIds[i]) : route.gpuDevs[i];
    if (device >= 0 && memory->canAccessPeer(comm->cudaDev, device)) reach |= uint64_t{1} << i;
  }
  return reach;
}

// What the transports are told of each rank: the NICs nearest this rank's GPU and their
// paths, the CUDA backend's memory and, for GPU communicator ranks of this host, the path
// between the GPUs (by their places in the topology, else the same device), and whether
// that rank's GPU can write this one's, and this one's read that one's.
void linkGpuPeers(ncclComm* comm, const topo::GpuRoute& route) {
  const PeerInfo& self = comm->peers[comm->rank];
  const GpuFifoMemory* memory = gpuFifoMemory();
  comm->nearNics = route.nearNics;
  comm->nearNicPaths.clear();
  for (PathType path : route.nearNicPaths) comm->nearNicPaths.push_back(static_cast<int>(path));
  comm->gpuLinks.assign(comm->nranks, LinkContext{});
  for (const PeerInfo& p : comm->peers) {
    LinkContext& link = comm->gpuLinks[p.rank];
    if (!comm->nearNics.empty()) {
      link.nearNics = &comm->nearNics;
      link.nearNicPaths = &comm->nearNicPaths;
    }
    link.gpuMemory = memory;  // this rank's network buffers may be GPU memory (GPUDirect RDMA)
    if (!p.gpuComm || p.hostHash != self.hostHash) continue;
    const bool placed = p.topoGpu >= 0 && self.topoGpu >= 0 && p.topoGpu < static_cast<int>(route.pathToGpu.size());
    if (placed) {
      link.gpuPath = static_cast<int>(route.pathToGpu[p.topoGpu]);
    } else if (p.gpuBusId == self.gpuBusId && (p.gpuBusId != 0 || p.cudaDev == self.cudaDev)) {
      link.gpuPath = static_cast<int>(PathType::LOC);
    }
    const bool sameGpu = link.gpuPath == static_cast<int>(PathType::LOC);
    link.peerWritesMine = sameGpu || (placed && self.topoGpu < 64 && ((p.gpuReach >> self.topoGpu) & 1) != 0);
    link.mineReadsPeer = sameGpu || (placed && p.topoGpu < 64 && ((self.gpuReach >> p.topoGpu) & 1) != 0);
  }
}

// The ranks of each host in ring order, hosts in the order the ring first reaches them:
// the chains of a tree across hosts (trees.h).
std::vector<std::vector<int>> hostChains(const std::vector<PeerInfo>& peers, const std::vector<int>& ring) {
  std::vector<std::vector<int>> chains;
  std::vector<uint64_t> hosts;
  for (int r : ring) {
    const size_t h = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), peers[r].hostHash) - hosts.begin());
    if (h == hosts.size()) {
      hosts.push_back(peers[r].hostHash);
      chains.emplace_back();
    }
    chains[h].push_back(r);
  }
  return chains;
}

// How many hosts the communicator spans: the distinct host identities of its ranks.
int hostCount(const std::vector<PeerInfo>& peers) {
  std::set<uint64_t> hosts;
  for (const PeerInfo& p : peers) hosts.insert(p.hostHash);
  return static_cast<int>(hosts.size());
}

// NCCL's commHash: the same on every rank of the communicator, from its unique id (FNV-1a).
uint64_t commHashOf(const ncclUniqueId& id) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char byte : id.internal) hash = (hash ^ static_cast<uint8_t>(byte)) * 0x100000001b3ull;
  return hash;
}

// NCCL_TUNER_PLUGIN's plugin, initialised for this communicator, consulted by its tuner
// from now on (none: the tuner alone decides). A plugin that cannot be used was WARNed about.
void attachTunerPlugin(ncclComm* comm, std::span<const ncclUniqueId> ids) {
  std::vector<uint64_t> hostOfRank;
  for (const PeerInfo& p : comm->peers) hostOfRank.push_back(p.hostHash);
  TuneConstants constants = comm->tuner->constants();
  std::unique_ptr<TunerPlugin> plugin =
      TunerPlugin::open(TunerPluginSettings::fromEnv(), tunerPluginComm(ids, hostOfRank),
                        comm->tuner->topology().hopLatencyUs, &constants);
  if (plugin == nullptr) return;
  comm->tuner->setConstants(constants);
  comm->tuner->attachPlugin(std::move(plugin));
}

// One INFO line per GPU communicator rank: where its GPU sits, and (rank 0) the ring and
// channels the topology gave.
void logGpuRouting(const ncclComm* comm, const topo::GpuRoute& route, const std::vector<int>& ring, int nChannels) {
  if (route.position < 0) return;  // routeGpu said why
  INFO(kSubsysGraph | kSubsysInit,
       "rank %d: CUDA device %d is GPU %s, place %d of its host's ring (narrowest hop %.1f GB/s)", comm->rank,
       comm->cudaDev, route.gpuName.c_str(), route.position, route.intraBw);
  if (comm->rank != 0) return;
  std::string order;
  for (int r : ring) {
    if (!order.empty()) order += ' ';
    order += std::to_string(r);
  }
  INFO(kSubsysGraph | kSubsysInit, "GPU ring %s, %d channel(s)", order.c_str(), nChannels);
}

}  // namespace

ncclResult_t initCommunicator(ncclComm* comm, std::span<const ncclUniqueId> ids) {
  const auto start = std::chrono::steady_clock::now();
  reportSettingsOnce();  // about the process, not this communicator
  // Kept after init, as NCCL's threads do: this thread's later lines name this communicator
  // until another call or work sets its own.
  setLogContext(comm->rank, comm->config.commName);
  comm->deterministic = envIntInRange("CHORUS_DETERMINISTIC", 0, 0, 1) != 0;
  CHORUS_CHECK(Bootstrap::create(ids, comm->rank, comm->nranks, &comm->abortFlag, &comm->bootstrap));
  comm->bootstrap->watchRevoke(&comm->revokeFlag);

  comm->peers.resize(comm->nranks);
  comm->peers[comm->rank] = localPeerInfo(comm);
  // Ranks per host decide the channels each can serve: learn them first, then share the wish.
  CHORUS_CHECK(comm->bootstrap->allGather(comm->peers.data(), sizeof(PeerInfo)));
  CHORUS_CHECK(checkNamedNetsUsable(comm));
  CHORUS_CHECK(checkDeterministicAgreed(comm));
  CHORUS_CHECK(checkGpusNotShared(*comm));
  comm->kernelLanes = kernelLaneBudget(comm->peers);
  int localRanks = 0;
  for (const PeerInfo& p : comm->peers) localRanks += p.hostHash == comm->peers[comm->rank].hostHash;
  PeerInfo& self = comm->peers[comm->rank];
  const bool gpu = comm->executorChoice.load() == ExecutorChoice::Cuda;
  topo::GpuRoute route;
  if (gpu) {
    CHORUS_CHECK(topo::routeGpu(comm->cudaDev, self.gpuBusId, hostCount(comm->peers), &route));
    self.ringPosition = route.position;
    self.ringHopGBs = route.intraBw;
    self.ringOverNvlink = route.nvlink ? 1 : 0;
    self.topoGpu = route.topoGpu;
    self.nicGBs = route.nicGBs;
    self.gpuReach = gpuReachOf(comm, route);
    self.channelsWanted = gpuChannelsWanted(comm, route.channels);
  } else {
    self.channelsWanted = cpuChannelsWanted(localRanks, comm->config);
  }
  offerBoard(comm);
  CHORUS_CHECK(comm->bootstrap->allGather(comm->peers.data(), sizeof(PeerInfo)));
  if (gpu) linkGpuPeers(comm, route);

  // Buffer sizes as NCCL's defaults: Simple 4 MiB, LL 512 KiB, LL128 about 4.7 MiB.
  const int nSlots = slotCountFromEnv();
  FifoLayout& coll = comm->collLayout;
  coll.nSlots = nSlots;
  coll.slotBytes[static_cast<int>(Protocol::Simple)] =
      slotBytesFromEnv("NCCL_BUFFSIZE", 4 << 20, nSlots, Protocol::Simple);
  coll.slotBytes[static_cast<int>(Protocol::LL)] =
      slotBytesFromEnv("NCCL_LL_BUFFSIZE", 512 << 10, nSlots, Protocol::LL);
  coll.slotBytes[static_cast<int>(Protocol::LL128)] =
      slotBytesFromEnv("NCCL_LL128_BUFFSIZE", 4915200, nSlots, Protocol::LL128);
  FifoLayout& p2p = comm->p2pLayout;
  p2p.nSlots = nSlots;
  p2p.slotBytes[static_cast<int>(Protocol::Simple)] =
      slotBytesFromEnv("CHORUS_P2P_BUFFSIZE", 1 << 20, nSlots, Protocol::Simple);
  p2p.slotBytes[static_cast<int>(Protocol::LL)] =
      slotBytesFromEnv("CHORUS_P2P_LL_BUFFSIZE", 64 << 10, nSlots, Protocol::LL);
  p2p.slotBytes[static_cast<int>(Protocol::LL128)] =
      slotBytesFromEnv("CHORUS_P2P_LL128_BUFFSIZE", 512 << 10, nSlots, Protocol::LL128);

  decideSharing(comm, commHashOf(ids[0]));
  CHORUS_CHECK(topo::applyTopologySettings(comm->rank, hostCount(comm->peers)));

  int nChannels = kMaxChannels;
  for (const PeerInfo& p : comm->peers) nChannels = std::min(nChannels, p.channelsWanted);
  // One ring order for every channel: deterministic mode's reduction order follows it.
  const std::vector<int> ring = ringOrder(comm->peers, comm->deterministic);
  const int myPlace = static_cast<int>(std::find(ring.begin(), ring.end(), comm->rank) - ring.begin());
  const std::vector<std::vector<int>> chains = hostChains(comm->peers, ring);
  if (gpu) logGpuRouting(comm, route, ring, nChannels);
  comm->channels.resize(nChannels);
  for (int c = 0; c < nChannels; ++c) {
    Channel& ch = comm->channels[c];
    ch.id = c;
    ch.ringRanks.resize(comm->nranks);
    for (int k = 0; k < comm->nranks; ++k) ch.ringRanks[k] = ring[(myPlace + k) % comm->nranks];
    ch.tree = chains.size() > 1 ? hostChainTree(chains, comm->rank, c % 2)
                                : doubleBinaryTree(comm->nranks, comm->rank, c % 2);
    ch.send.resize(comm->nranks);
    ch.recv.resize(comm->nranks);
    if (comm->nranks > 1) CHORUS_CHECK(connectChannel(comm, ch));
  }
  comm->p2pSend.resize(comm->nranks);
  comm->p2pRecv.resize(comm->nranks);
  comm->rmaSend.resize(comm->nranks);
  comm->rmaRecv.resize(comm->nranks);
  CHORUS_CHECK(awaitConnections(comm));
  CHORUS_CHECK(joinBoard(comm));
  // Also the end of set-up's last exchange: every rank is connected once it returns.
  TuneTopology tuned;
  TuneConstants constants;  // the CPU calibration, or a GPU communicator's figures
  CHORUS_CHECK(commTuneTopology(comm, chains.size() > 1 ? hostChainTreeDepth(chains) : 0, hostCount(comm->peers),
                                everyRankPlaced(comm->peers), &tuned, &constants));
  tuned.board = !comm->board.empty();
  comm->tuner = std::make_unique<Tuner>(Tuner::fromEnv(tuned, constants));
  attachTunerPlugin(comm, ids);
  comm->refreshView();
  comm->localRanks = localRanks;
  comm->timeoutSec = static_cast<double>(envIntInRange("CHORUS_TIMEOUT", 600, 0, INT32_MAX));
  comm->fingerprints = envIntInRange("CHORUS_FINGERPRINTS", 1, 0, 1) != 0;
  armReportSignal();
  comm->sendSeq.assign(comm->nranks, 0);
  comm->recvSeq.assign(comm->nranks, 0);

  if (comm->deterministic)
    INFO(kSubsysInit | kSubsysTuning,
         "deterministic mode (CHORUS_DETERMINISTIC=1): AllReduce, Reduce and ReduceScatter combine ranks in the "
         "order 0..%d along the ring, whatever NCCL_ALGO says",
         comm->nranks - 1);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  INFO(kSubsysInit, "comm %p%s%s rank %d nRanks %d nChannels %d pid %d %s - Init COMPLETE (%.1f ms)",
       static_cast<void*>(comm), comm->config.commName.empty() ? "" : " commName ", comm->config.commName.c_str(),
       comm->rank, comm->nranks, nChannels, getpid(),
       gpu ? ("GPU communicator, CUDA device " + std::to_string(comm->cudaDev)).c_str() : "CPU communicator", ms);
  comm->profiler = CommProfiler::attach(*comm, commHashOf(ids[0]), hostCount(comm->peers));
  comm->ready.store(true);
  return ncclSuccess;
}

}  // namespace chorus
