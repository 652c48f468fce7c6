#include "src/comm/comm.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/env.h"
#include "src/comm/shared_connections.h"
#include "src/enqueue/plan.h"
#include "src/executor/executor.h"
#include "src/profiler/profiler.h"
#include "src/rma/rma_service.h"

namespace {
std::atomic<uint64_t> gNextSerial{1};
}  // namespace

ncclComm::ncclComm() : serial(gNextSerial.fetch_add(1)), plan(std::make_unique<chorus::PlanLanes>()) {
  chorus::registerComm(this);
}

ncclComm::~ncclComm() {
  worker.reset();  // joins: no job may run while the connections go away
  rma.reset();     // joins its service thread, which reads the one-sided connections
  // Aborted: tell the peers now (and let NET connections close without draining), before
  // waiting for this rank's kernels, so that the peers' kernels stop waiting for them too.
  if (abortFlag.load() != 0) breakConnections();
  chosenExecutor.store(nullptr);
  executor.reset();  // waits for its kernels, which may still be using the connections
  if (abortFlag.load() == 0) markDestroyed();
  profiler.reset();  // the plugin's finalize, once no work of this communicator is left
  // Gives back what it borrowed, and keeps its channels where another still uses them.
  if (sharedConns) sharedConns->leave(channels);
  magic = 0;
  chorus::unregisterComm(this);
}

void ncclComm::haltWork(std::atomic<uint32_t>& flag) {
  flag.store(1);
  {
    // A child this communicator's job is setting up (a split, shrink or grow) waits on the
    // child's own flag (the activeRuns wait below would otherwise last until its set-up
    // gives up): an abort and a revoke both stop it.
    std::lock_guard<std::mutex> lock(chorus::commLifecycleMutex());
    if (childInSetUp != nullptr) childInSetUp->abortFlag.store(1);
  }
  if (chorus::Executor* e = chosenExecutor.load(std::memory_order_seq_cst))
    e->abort();  // seq_cst: see CudaExecutor::enqueue
  while (activeRuns.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

uint64_t ncclComm::gpuFifoBytes() {
  uint64_t bytes = 0;
  forEachConnection([&bytes](chorus::Connection& c) {
    if (c.connected() && c.resource != nullptr) bytes += c.resource->gpuBytes();
  });
  return bytes;
}

size_t ncclComm::releaseIdleBuffers() {
  size_t released = 0;
  // Not a connection another communicator shares (it may be running on it).
  forEachWorkConnection([&](chorus::Connection& c) {
    if (c.connected() && c.resource != nullptr && !lentToAnother(c)) released += c.resource->releaseIdleSlots();
  });
  return released;
}

void ncclComm::breakConnections() {
  // Send ends too: every end holds its FIFO's memory (a P2P sender shares its peer's), so a
  // peer waiting on either direction learns of it at once. Borrowed connections too: their
  // peers may wait on them for this one (shared_connections.h).
  forEachConnection([](chorus::Connection& mine) {
    chorus::Connection& c = mine.used();
    if (c.connected() && c.resource != nullptr) chorus::markBroken(c.end.ctrl, chorus::kBrokenByPeer);
  });
}

void ncclComm::markDestroyed() {
  // Every call of this rank is done, so a peer still waiting on one of these FIFOs waits for
  // a call this rank never made: it fails at once, as over the network, where the closed
  // socket tells it. Only direct FIFOs: a proxied one's close comes from its network
  // connection, after the proxy has sent what was published (marking it would drop that).
  // What this rank published stays readable: a wait looks at its FIFO before at `broken`.
  // Not the one-sided connections: a peer's WaitSignal looks at `broken` before the service
  // thread has landed every put already published.
  // Not one another communicator still uses (shared_connections.h marks it when the last goes).
  forEachWorkConnection([this](chorus::Connection& c) {
    if (!lentToAnother(c)) chorus::markDestroyedFifo(c);
  });
}

bool ncclComm::lentToAnother(const chorus::Connection& c) { return sharedConns && sharedConns->lent(c); }

void ncclComm::refreshView() {
  ++viewVersion;
  channelViews.resize(channels.size());
  auto endOf = [](chorus::Connection& c) { return c.used().connected() ? &c.used().end : nullptr; };
  for (size_t c = 0; c < channels.size(); ++c) {
    chorus::Channel& ch = channels[c];
    chorus::ChannelView& v = channelViews[c];
    v = chorus::ChannelView{};
    if (nranks > 1) {
      v.ringRecv = endOf(ch.recv[ch.ringRanks[nranks - 1]]);
      v.ringSend = endOf(ch.send[ch.ringRanks[1]]);
    }
    v.ringRanks = ch.ringRanks.data();
    v.tree.parent = ch.tree.parent;
    v.tree.nChildren = ch.tree.nChildren;
    if (ch.tree.parent >= 0) {
      v.tree.sendUp = endOf(ch.send[ch.tree.parent]);
      v.tree.recvDown = endOf(ch.recv[ch.tree.parent]);
    }
    for (int i = 0; i < ch.tree.nChildren; ++i) {
      v.tree.recvUp[i] = endOf(ch.recv[ch.tree.children[i]]);
      v.tree.sendDown[i] = endOf(ch.send[ch.tree.children[i]]);
    }
  }
  p2pSendEnds.assign(nranks, nullptr);
  p2pRecvEnds.assign(nranks, nullptr);
  for (int p = 0; p < nranks; ++p) {
    if (p2pSend[p].connected()) p2pSendEnds[p] = &p2pSend[p].end;
    if (p2pRecv[p].connected()) p2pRecvEnds[p] = &p2pRecv[p].end;
  }
  view.rank = rank;
  view.nranks = nranks;
  view.nChannels = static_cast<int>(channels.size());
  view.ordered = deterministic;
  view.channels = channelViews.data();
  view.p2pSend = p2pSendEnds.data();
  view.p2pRecv = p2pRecvEnds.data();
  boardEnds.clear();
  for (chorus::Connection& c : board) boardEnds.push_back(&c.end);
  view.board = boardEnds.empty() ? nullptr : boardEnds.data();
}

namespace chorus {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::mutex& commLifecycleMutex() {
  static std::mutex mutex;
  return mutex;
}

uint64_t localHostHash() {
  if (auto id = envValue("NCCL_HOSTID")) return fnv1a(*id);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::string identity = host;
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (std::getline(bootId, boot)) identity += boot;
  return fnv1a(identity);
}

}  // namespace chorus
