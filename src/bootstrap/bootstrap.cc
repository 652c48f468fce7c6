// Unique ids and Bootstrap::create: where the root lives, and which interface a rank
// listens on.
#include "src/bootstrap/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "core/env.h"
#include "core/interfaces.h"
#include "src/bootstrap/bootstrap_auth.h"
#include "src/bootstrap/bootstrap_ring.h"
#include "src/bootstrap/bootstrap_root.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus {

int rootOfRank(int rank, int nranks, int nroots) {
  const int perRoot = nranks / nroots;
  const int larger = nranks % nroots;  // roots serving perRoot + 1 ranks, first
  const int inLarger = larger * (perRoot + 1);
  return rank < inLarger ? rank / (perRoot + 1) : larger + (rank - inLarger) / perRoot;
}

RootBlock blockOfRoot(int root, int nranks, int nroots) {
  const int perRoot = nranks / nroots;
  const int larger = nranks % nroots;
  RootBlock block;
  block.first = root * perRoot + std::min(root, larger);
  block.count = perRoot + (root < larger ? 1 : 0);
  return block;
}

// The id's bytes: the secret, the root's address, then one flag byte.
// How long the first rank waits for a previous root to leave the NCCL_COMM_ID address.
constexpr int kRootAddressWaitSeconds = 10;
constexpr size_t kRootOffset = sizeof(uint64_t);
constexpr size_t kFlagOffset = kRootOffset + sizeof(sockaddr_in6);

void packUniqueId(const UniqueIdContents& contents, ncclUniqueId* id) {
  static_assert(kFlagOffset < sizeof(ncclUniqueId::internal));
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &contents.secret, sizeof(uint64_t));
  memcpy(id->internal + kRootOffset, &contents.root.storage, contents.root.length());
  id->internal[kFlagOffset] = contents.rootStartedByRank0 ? 1 : 0;
}

bool unpackUniqueId(const ncclUniqueId& id, UniqueIdContents* contents) {
  memcpy(&contents->secret, id.internal, sizeof(uint64_t));
  sockaddr_in6 raw{};  // the larger of the two; a sockaddr_in fits in its front
  memcpy(&raw, id.internal + kRootOffset, sizeof(raw));
  contents->rootStartedByRank0 = id.internal[kFlagOffset] == 1;
  return contents->root.assign(reinterpret_cast<const sockaddr*>(&raw), sizeof(raw));
}

namespace {

// The secret of an NCCL_COMM_ID job: every process derives the same one from the string.
uint64_t fnv1a64(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::optional<std::string> commIdSetting() {
  auto value = envValue("NCCL_COMM_ID");
  if (value && value->empty()) return std::nullopt;
  return value;
}

}  // namespace

ncclResult_t bootstrapGetUniqueId(ncclUniqueId* id, RootPlacement placement) {
  if (id == nullptr) {
    WARN("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  UniqueIdContents contents;
  auto commId = placement == RootPlacement::kAsConfigured ? commIdSetting() : std::nullopt;
  if (commId) {
    // Rank 0 starts the root at this address in Bootstrap::create.
    CHORUS_CHECK(parseHostPort(*commId, socketFamilySetting(), &contents.root));
    contents.secret = fnv1a64(*commId);
    contents.rootStartedByRank0 = true;
    packUniqueId(contents, id);
    INFO(kSubsysBootstrap, "Bootstrap: NCCL_COMM_ID=%s, root at %s (started by rank 0)", commId->c_str(),
         contents.root.toString().c_str());
    return ncclSuccess;
  }
  NetInterface iface;
  CHORUS_CHECK(findBootstrapInterface(AF_UNSPEC, &iface));
  INFO(kSubsysInit | kSubsysNet, "Bootstrap: using %s:%s", iface.name.c_str(), iface.address.hostToString().c_str());
  Socket listener;
  CHORUS_CHECK(Socket::listen(iface.address, &listener));
  CHORUS_CHECK(randomBytes(&contents.secret, sizeof(contents.secret), "the unique id's secret"));
  contents.root = listener.address();
  CHORUS_CHECK(startBootstrapRoot(std::move(listener), contents.secret));
  packUniqueId(contents, id);
  INFO(kSubsysBootstrap, "Bootstrap: root listening on %s", contents.root.toString().c_str());
  return ncclSuccess;
}

ncclResult_t Bootstrap::create(const ncclUniqueId& id, int rank, int nranks, const std::atomic<uint32_t>* abortFlag,
                               std::unique_ptr<Bootstrap>* out) {
  return create(std::span<const ncclUniqueId>(&id, 1), rank, nranks, abortFlag, out);
}

ncclResult_t Bootstrap::create(std::span<const ncclUniqueId> ids, int rank, int nranks,
                               const std::atomic<uint32_t>* abortFlag, std::unique_ptr<Bootstrap>* out) {
  if (out == nullptr) {
    WARN("Bootstrap::create: out is NULL");
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("Bootstrap::create: rank %d is outside [0, nranks=%d)", rank, nranks);
    return ncclInvalidArgument;
  }
  if (ids.empty()) {
    WARN("Bootstrap::create: no unique id");
    return ncclInvalidArgument;
  }
  const int nroots = static_cast<int>(std::min<size_t>(ids.size(), nranks));
  const int mine = rootOfRank(rank, nranks, nroots);
  const RootBlock block = blockOfRoot(mine, nranks, nroots);
  std::vector<UniqueIdContents> roots(nroots);
  for (int k = 0; k < nroots; ++k) {
    if (!unpackUniqueId(ids[k], &roots[k])) {
      WARN("Bootstrap::create: unique id %d of %zu holds no root address (was it made by ncclGetUniqueId?)", k,
           ids.size());
      return ncclInvalidArgument;
    }
  }
  const UniqueIdContents& root = roots[mine];
  if (rank == block.first && root.rootStartedByRank0) {
    // Under NCCL_COMM_ID the previous communicator's root listens on the same address until
    // a moment after it has answered its last rank, which may be after that communicator's
    // ranks went on to this one: try again for a while. (Given up, the other ranks would
    // wait for a root at that address until CHORUS_BOOTSTRAP_TIMEOUT.)
    Socket rootListener;
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(kRootAddressWaitSeconds);
    for (bool inUse = true; Socket::listen(root.root, &rootListener, &inUse) != ncclSuccess;) {
      if (!inUse) return ncclSystemError;  // listen WARNed
      if (abortFlag != nullptr && abortFlag->load() != 0) return ncclSystemError;
      if (std::chrono::steady_clock::now() >= giveUp) {
        WARN("Bootstrap: rank %d cannot start the NCCL_COMM_ID root on %s: the address stayed in use for %d s", rank,
             root.root.toString().c_str(), kRootAddressWaitSeconds);
        return ncclSystemError;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    INFO(kSubsysBootstrap, "Bootstrap: rank %d started the NCCL_COMM_ID root on %s", rank,
         rootListener.address().toString().c_str());
    CHORUS_CHECK(startBootstrapRoot(std::move(rootListener), root.secret));
  }
  // Listen where the root can be reached: on its subnet if we have one, else as configured.
  NetInterface iface;
  if (!findInterfaceMatchingSubnet(root.root, &iface)) {
    CHORUS_CHECK(findBootstrapInterface(root.root.family(), &iface));
  }
  INFO(kSubsysInit | kSubsysNet, "Bootstrap: using %s:%s", iface.name.c_str(), iface.address.hostToString().c_str());
  Socket listener;
  CHORUS_CHECK(Socket::listen(iface.address, &listener));
  // Ranks prove the first id's secret to each other; each root, its own.
  auto bootstrap = std::make_unique<RingBootstrap>(rank, nranks, roots[0].secret, abortFlag, std::move(listener));
  std::optional<RootContact> previous;
  if (nroots > 1 && rank == block.first) {
    const int k = (mine + nroots - 1) % nroots;
    previous = RootContact{roots[k].root, roots[k].secret, blockOfRoot(k, nranks, nroots), roots[k].rootStartedByRank0};
  }
  CHORUS_CHECK(bootstrap->connect(RootContact{root.root, root.secret, block, root.rootStartedByRank0}, previous));
  *out = std::move(bootstrap);
  return ncclSuccess;
}

}  // namespace chorus
