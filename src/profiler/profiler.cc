#include "src/profiler/profiler.h"

#include <time.h>

#include <iterator>

#include "core/debug.h"
#include "src/comm/comm.h"
#include "src/profiler/profiler_plugin.h"
#include "src/profiler/proxy_events.h"

namespace chorus {
namespace {

// NCCL's rule: an event starts when its bit, or the bit of an event type below it, is set.
constexpr int kKernelChWanted = ncclProfileKernelCh | ncclProfileKernelPhase;
constexpr int kBelowProxy = ncclProfileProxyOp | ncclProfileProxyStep | kKernelChWanted | ncclProfileNetPlugin;
constexpr int kCeEvents = ncclProfileCeColl | ncclProfileCeSync | ncclProfileCeBatch;
constexpr int kCollWanted = ncclProfileColl | kBelowProxy;
constexpr int kP2pWanted = ncclProfileP2p | kBelowProxy;
constexpr int kGroupWanted = ncclProfileGroup | kCollWanted | kP2pWanted;
constexpr int kCollApiWanted = ncclProfileCollApi | kCollWanted | kCeEvents;
constexpr int kP2pApiWanted = ncclProfileP2pApi | kP2pWanted;
constexpr int kGroupApiWanted =
    ncclProfileGroupApi | ncclProfileKernelLaunch | kGroupWanted | kCollApiWanted | kP2pApiWanted;

// The collectives come first in WorkKind; seqNumbers_ has one counter for each.
static_assert(static_cast<int>(WorkKind::AllReduce) == 0 && static_cast<int>(WorkKind::Reduce) == 4 &&
              static_cast<int>(WorkKind::Send) == 5);

// The names NCCL gives plugins (its ncclFuncToString, ncclDatatypeToString, ncclAlgoToString,
// ncclProtoToString), which differ from Chorus' log names ("RING", "SIMPLE"). NCCL calls
// ncclUint8 "Unknown" (its table lacks it); Chorus names it.
const char* funcName(WorkKind kind) {
  switch (kind) {
    case WorkKind::AllReduce:
      return "AllReduce";
    case WorkKind::ReduceScatter:
      return "ReduceScatter";
    case WorkKind::AllGather:
      return "AllGather";
    case WorkKind::Broadcast:
      return "Broadcast";
    case WorkKind::Reduce:
      return "Reduce";
    case WorkKind::Send:
      return "Send";
    case WorkKind::Recv:
      return "Recv";
    default:
      return "Invalid";
  }
}

const char* datatypeName(ncclDataType_t type) {
  static constexpr const char* kNames[] = {"ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
                                           "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
                                           "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  const int index = static_cast<int>(type);
  return index >= 0 && index < static_cast<int>(std::size(kNames)) ? kNames[index] : "Unknown";
}

const char* algoName(const OpPlacement& p) {
  if (p.nChannels == 0) return "Unknown";
  return p.algo == Algorithm::Tree ? "TREE" : p.algo == Algorithm::Ring ? "RING" : "Unknown";
}

const char* protoName(const OpPlacement& p) {
  if (p.nChannels == 0) return "Unknown";
  switch (p.proto) {
    case Protocol::LL:
      return "LL";
    case Protocol::LL128:
      return "LL128";
    case Protocol::Simple:
      return "SIMPLE";
    default:
      return "Unknown";
  }
}

uint64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

ncclProfilerEventDescr_v7_t descriptor(uint64_t type, void* parent, int rank) {
  ncclProfilerEventDescr_v7_t d{};
  d.type = type;
  d.parentObj = parent;
  d.rank = rank;
  return d;
}

}  // namespace

void GroupApiEvent::start(std::shared_ptr<const ProfilerPlugin> plugin, void* context, int rank, int groupDepth) {
  plugin_ = std::move(plugin);
  active_ = true;
  ncclProfilerEventDescr_v7_t d = descriptor(ncclProfileGroupApi, nullptr, rank);
  d.groupApi.graphCaptured = false;
  d.groupApi.groupDepth = groupDepth;
  plugin_->startEvent(context, &handle_, d);
  plugin_->recordEventState(handle_, ncclProfilerGroupStartApiStop);
}

void GroupApiEvent::recordEndBegins() { plugin_->recordEventState(handle_, ncclProfilerGroupEndApiStart); }

void GroupApiEvent::stopNow() {
  plugin_->stopEvent(handle_);
  handle_ = nullptr;
  active_ = false;
  plugin_.reset();
}

std::unique_ptr<CommProfiler> CommProfiler::attach(ncclComm& comm, uint64_t commHash, int nNodes) {
  std::shared_ptr<ProfilerPlugin> plugin = sharedProfilerPlugin();
  if (plugin == nullptr) return nullptr;
  void* context = nullptr;
  // The name lives as long as the communicator, as NCCL's does (plugins keep the pointer).
  const char* commName = comm.config.commName.empty() ? nullptr : comm.config.commName.c_str();
  const ncclResult_t r = plugin->init(&context, commHash, commName, nNodes, comm.nranks, comm.rank);
  if (r != ncclSuccess) {
    WARN("PROFILER/Plugin: %s (%s): init failed for comm %p rank %d: %s (%d); the communicator runs without it",
         plugin->name().c_str(), plugin->path().c_str(), static_cast<const void*>(&comm), comm.rank,
         ncclGetErrorString(r), static_cast<int>(r));
    return nullptr;
  }
  INFO(kSubsysInit | kSubsysProfile,
       "PROFILER/Plugin: %s initialized for comm %p rank %d nranks %d commHash 0x%llx: event mask 0x%x",
       plugin->name().c_str(), static_cast<const void*>(&comm), comm.rank, comm.nranks,
       static_cast<unsigned long long>(commHash), plugin->activationMask());
  return std::unique_ptr<CommProfiler>(new CommProfiler(comm, std::move(plugin), context));
}

CommProfiler::CommProfiler(ncclComm& comm, std::shared_ptr<const ProfilerPlugin> plugin, void* context)
    : comm_(comm),
      plugin_(std::move(plugin)),
      context_(context),
      rank_(comm.rank),
      proxyEvents_(std::make_shared<ProxyOpEvents>(plugin_, context, comm.rank)),
      ctrlEvents_(std::make_unique<ProxyCtrlEvents>(plugin_, context, comm.rank)) {}

CommProfiler::~CommProfiler() {
  // No ProxyOp or ProxyStep event of this context may stop after its finalize. Not on a
  // connection another communicator borrows (splitShare): its traffic is not this one's
  // (and this one's launches, traced, have all ended).
  comm_.forEachConnection([this](Connection& c) {
    if (c.resource != nullptr && !comm_.lentToAnother(c)) c.resource->stopTracing();
  });
  ctrlEvents_.reset();
  if (context_ != nullptr) plugin_->finalize(context_);  // as NCCL: a plugin that gave no context gets no finalize
}

void CommProfiler::recordCall(GroupApiEvent& groupApi, int groupDepth, CollOp& op) {
  const int mask = plugin_->activationMask();
  op.profile.mask = mask;
  if (!groupApi.active() && (mask & kGroupApiWanted) != 0) groupApi.start(plugin_, context_, rank_, groupDepth);
  const bool p2p = isPointToPoint(op.kind);
  if ((mask & (p2p ? kP2pApiWanted : kCollApiWanted)) == 0) return;
  ncclProfilerEventDescr_v7_t d = descriptor(p2p ? ncclProfileP2pApi : ncclProfileCollApi, groupApi.handle(), rank_);
  if (p2p) {
    d.p2pApi = ncclProfilerP2pApiDescr_v7_t{funcName(op.kind), op.count, datatypeName(op.dtype),
                                            op.stream,         false,    op.profile.userTag};
  } else {
    d.collApi = ncclProfilerCollApiDescr_v7_t{funcName(op.kind), op.count, datatypeName(op.dtype), op.root,
                                              op.stream,         false,    op.profile.userTag};
  }
  // The call is recorded: its API event ends here, and stays the parent of the launch's event.
  plugin_->startEvent(context_, &op.profile.apiEvent, d);
  plugin_->stopEvent(op.profile.apiEvent);
}

void CommProfiler::beforePlanning(std::vector<CollOp>& ops) {
  placements_.assign(ops.size(), OpPlacement{});  // not resized again before launchBegins
  for (size_t i = 0; i < ops.size(); ++i) ops[i].profile.placement = &placements_[i];
}

void CommProfiler::launchBegins(const std::vector<CollOp>& ops, bool onHost) {
  int mask = 0;
  for (const CollOp& op : ops) mask |= op.profile.mask;
  channelEvents_.clear();
  callEvents_.assign(ops.size(), nullptr);
  groupEvent_ = nullptr;
  if ((mask & kGroupWanted) != 0) {
    ncclProfilerEventDescr_v7_t d = descriptor(ncclProfileGroup, nullptr, rank_);
    plugin_->startEvent(context_, &groupEvent_, d);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const CollOp& op = ops[i];
    const OpPlacement& placed = i < placements_.size() ? placements_[i] : OpPlacement{};
    const uint8_t nChannels = static_cast<uint8_t>(placed.nChannels);
    ncclProfilerEventDescr_v7_t d = descriptor(0, op.profile.apiEvent, rank_);
    if (isPointToPoint(op.kind)) {
      if ((op.profile.mask & kP2pWanted) == 0) continue;
      d.type = ncclProfileP2p;
      // The buffer a send reads or a receive writes.
      void* buff = op.kind == WorkKind::Send ? const_cast<void*>(op.sendbuff) : op.recvbuff;
      d.p2p = ncclProfilerP2pDescr_v7_t{funcName(op.kind), buff,        datatypeName(op.dtype), op.count, op.root,
                                        nChannels,         groupEvent_, op.profile.userTag};
    } else {
      // Counted whether or not the event is wanted: the mask may change, the numbers must not skip.
      const uint64_t seq = seqNumbers_[static_cast<int>(op.kind)]++;
      if ((op.profile.mask & kCollWanted) == 0) continue;
      d.type = ncclProfileColl;
      ncclProfilerCollDescr_v7_t& c = d.coll;
      c.seqNumber = seq;
      c.func = funcName(op.kind);
      c.sendBuff = op.sendbuff;
      c.recvBuff = op.recvbuff;
      c.count = op.count;
      c.root = op.root;
      c.datatype = datatypeName(op.dtype);
      c.nChannels = nChannels;
      c.nWarps = 0;  // no warps on the host; on the GPU a lane is a block of fixed size
      c.algo = algoName(placed);
      c.proto = protoName(placed);
      c.parentGroup = groupEvent_;
      c.kernelVariant = nullptr;  // no symmetric kernels
      c.isSymColl = false;
      c.userTag = op.profile.userTag;
    }
    void* handle = nullptr;
    plugin_->startEvent(context_, &handle, d);
    if (handle == nullptr) continue;
    callEvents_[i] = handle;
    if (!onHost || (op.profile.mask & kKernelChWanted) == 0) continue;
    const uint64_t start = monotonicNs();
    for (uint8_t channel = 0; channel < nChannels; ++channel) {
      ncclProfilerEventDescr_v7_t ch = descriptor(ncclProfileKernelCh, handle, rank_);
      ch.kernelCh = ncclProfilerKernelChDescr_t{channel, start};
      void* channelEvent = nullptr;
      plugin_->startEvent(context_, &channelEvent, ch);
      if (channelEvent != nullptr) channelEvents_.push_back(channelEvent);
    }
  }
  if (onHost) proxyEvents_->start(comm_, placements_, callEvents_, mask);
  if ((mask & ncclProfileProxyCtrl) != 0) ctrlEvents_->attachIfProxied(comm_);
}

void CommProfiler::launchEnded() {
  if (!channelEvents_.empty()) {
    ncclProfilerEventStateArgs_v7_t stop{};
    stop.kernelCh.pTimer = monotonicNs();
    for (void* handle : channelEvents_) {
      plugin_->recordEventState(handle, ncclProfilerKernelChStop, &stop);
      plugin_->stopEvent(handle);
    }
    channelEvents_.clear();
  }
  for (void* handle : callEvents_) plugin_->stopEvent(handle);  // null: nothing to stop
  callEvents_.clear();
  plugin_->stopEvent(groupEvent_);
  groupEvent_ = nullptr;
  placements_.clear();
}

}  // namespace chorus
