// What the bootstrap tests share: ranks as threads of this process, raw connections that
// play intruders or ranks speaking the wire protocol by hand, and a catcher of WARNs.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/debug.h"
#include "core/socket.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/bootstrap_root.h"
#include "src/bootstrap/bootstrap_wire.h"

namespace chorus::bootstrap_testing {

using Clock = std::chrono::steady_clock;
using BootstrapList = std::vector<std::unique_ptr<Bootstrap>>;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Creates `nranks` bootstraps concurrently, one thread per rank, over one id or several.
inline BootstrapList createAll(std::span<const ncclUniqueId> ids, int nranks,
                               const std::atomic<uint32_t>* abortFlag = nullptr) {
  BootstrapList all(nranks);
  std::vector<ncclResult_t> results(nranks, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] { results[r] = Bootstrap::create(ids, r, nranks, abortFlag, &all[r]); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    if (results[r] == ncclSuccess) {
      EXPECT_EQ(all[r]->rank(), r);
      EXPECT_EQ(all[r]->nranks(), nranks);
    }
  }
  return all;
}
inline BootstrapList createAll(const ncclUniqueId& id, int nranks, const std::atomic<uint32_t>* abortFlag = nullptr) {
  return createAll(std::span<const ncclUniqueId>(&id, 1), nranks, abortFlag);
}

// Runs `body(rank, bootstrap)` on every rank concurrently.
inline void onEveryRank(BootstrapList& all, const std::function<void(int, Bootstrap&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < all.size(); ++r) threads.emplace_back([&, r] { body(static_cast<int>(r), *all[r]); });
  for (auto& t : threads) t.join();
}

inline uint8_t slotByte(int owner, size_t i) { return static_cast<uint8_t>(owner * 37 + i * 11 + 3); }

// Every rank fills its slot with its own pattern; every slot must arrive intact.
inline void checkAllGather(BootstrapList& all, size_t bytesPerRank) {
  const int nranks = static_cast<int>(all.size());
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    std::vector<uint8_t> data(bytesPerRank * nranks, 0xee);
    for (size_t i = 0; i < bytesPerRank; ++i) data[rank * bytesPerRank + i] = slotByte(rank, i);
    ASSERT_EQ(b.allGather(data.data(), bytesPerRank), ncclSuccess) << "rank " << rank;
    for (int owner = 0; owner < nranks; ++owner) {
      for (size_t i = 0; i < bytesPerRank; ++i) {
        ASSERT_EQ(data[owner * bytesPerRank + i], slotByte(owner, i))
            << "rank " << rank << " slot " << owner << " byte " << i;
      }
    }
  });
}

inline UniqueIdContents newRoot(ncclUniqueId* id) {
  EXPECT_EQ(bootstrapGetUniqueId(id), ncclSuccess);
  UniqueIdContents contents;
  EXPECT_TRUE(unpackUniqueId(*id, &contents));
  return contents;
}

// A raw connection to `where` that sends `bytes` (possibly none) and stays open.
inline Socket intruder(const SocketAddress& where, const void* bytes, size_t size) {
  Socket s;
  EXPECT_EQ(Socket::connect(where, Deadline(10, nullptr), &s), ncclSuccess);
  if (size > 0) {
    EXPECT_EQ(s.sendAll(bytes, size, Deadline(10, nullptr)), ncclSuccess);
  }
  return s;
}

inline std::vector<char> randomBytes(size_t size) {
  std::mt19937 gen(12345);
  std::vector<char> bytes(size);
  for (char& c : bytes) c = static_cast<char>(gen());
  return bytes;
}

inline SocketAddress loopbackAddress() {
  SocketAddress a;
  a.storage.ss_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(&a.storage)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// What the protocol before the challenges sent: the secret in clear, first.
struct LegacyRootHello {
  uint64_t secret;
  int32_t rank;
  int32_t nranks;
  RootBlock block;
  int32_t successorOnly;
  sockaddr_storage listenAddress;
};
struct LegacyWireHeader {
  uint64_t secret;
  int32_t rank;
  int32_t kind;
  int32_t tag;
  uint32_t reserved;
  uint64_t size;
};

inline Challenge readChallenge(Socket& s) {
  Challenge challenge{};
  EXPECT_EQ(s.recvAll(&challenge, sizeof(challenge), Deadline(10, nullptr)), ncclSuccess);
  EXPECT_EQ(challenge.magic, kChallengeMagic);
  return challenge;
}

// Connects to a root and reports `hello`, proven under `secret` as a rank would.
inline Socket provenReport(const SocketAddress& root, uint64_t secret, RootHello hello) {
  Socket s;
  EXPECT_EQ(Socket::connect(root, Deadline(10, nullptr), &s), ncclSuccess);
  hello.proof = rootHelloProof(bootstrapKey(secret), readChallenge(s), hello);
  EXPECT_EQ(s.sendAll(&hello, sizeof(hello), Deadline(10, nullptr)), ncclSuccess);
  return s;
}

// What `s` receives until its peer closes it or `seconds` pass; `*closed` says which.
inline std::string readUntilClosed(Socket& s, double seconds, bool* closed) {
  std::string bytes;
  *closed = false;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!*closed && Clock::now() < end) {
    pollfd readable{s.fd(), POLLIN, 0};
    poll(&readable, 1, 50);
    char buffer[512];
    size_t received = 0;
    if (s.tryRecv(buffer, sizeof(buffer), &received, closed) != ncclSuccess) *closed = true;
    bytes.append(buffer, received);
  }
  return bytes;
}

// A listener dropped `s`: it sent its challenge and nothing after, then closed.
// (A listener that closes with bytes of ours unread resets the connection, which may cost
// us the challenge too.)
inline void expectDropped(Socket& s, const char* what, double seconds = 5.0) {
  bool closed = false;
  const std::string got = readUntilClosed(s, seconds, &closed);
  EXPECT_TRUE(closed) << what << ": still open after " << seconds << " s";
  EXPECT_LE(got.size(), sizeof(Challenge)) << what << ": more than the challenge came back";
}

inline bool containsSecret(const std::string& wire, uint64_t secret) {
  const char* bytes = reinterpret_cast<const char*>(&secret);
  return std::search(wire.begin(), wire.end(), bytes, bytes + sizeof(secret)) != wire.end();
}

// Where a rank's listener is, and the nonce its hellos must be proven with.
struct ListenerView {
  SocketAddress address;
  uint64_t nonce[2] = {0, 0};
};

// The test plays the root, so it learns where ranks listen and can reach their
// listeners while the ring is being formed: `beforeReply` runs after every rank has
// reported and before any is answered.
inline BootstrapList createWithTestRoot(int nranks, uint64_t secret, std::vector<ListenerView>* listeners,
                                        const std::function<void()>& beforeReply) {
  Socket testRoot;
  EXPECT_EQ(Socket::listen(loopbackAddress(), &testRoot), ncclSuccess);
  ncclUniqueId id;
  packUniqueId({secret, testRoot.address()}, &id);
  BootstrapList all;
  std::thread ranks([&] { all = createAll(id, nranks); });
  std::vector<Socket> rankSockets(nranks);
  listeners->assign(nranks, ListenerView());
  for (int i = 0; i < nranks; ++i) {
    Socket s;
    RootHello hello{};
    EXPECT_EQ(testRoot.accept(Deadline(30, nullptr), &s), ncclSuccess);
    const Challenge challenge{kChallengeMagic, {0x1111u + static_cast<uint64_t>(i), 0x2222}};
    EXPECT_EQ(s.sendAll(&challenge, sizeof(challenge), Deadline(30, nullptr)), ncclSuccess);
    EXPECT_EQ(s.recvAll(&hello, sizeof(hello), Deadline(30, nullptr)), ncclSuccess);
    EXPECT_EQ(hello.proof, rootHelloProof(bootstrapKey(secret), challenge, hello));
    EXPECT_EQ(hello.nranks, nranks);
    if (hello.rank < 0 || hello.rank >= nranks) {
      ADD_FAILURE() << "rank " << hello.rank;
      break;
    }
    ListenerView& view = (*listeners)[hello.rank];
    view.address.assign(reinterpret_cast<sockaddr*>(&hello.listenAddress), sizeof(hello.listenAddress));
    view.nonce[0] = hello.listenNonce[0];
    view.nonce[1] = hello.listenNonce[1];
    rankSockets[hello.rank] = std::move(s);
  }
  beforeReply();
  for (int r = 0; r < nranks; ++r) {
    const ListenerView& successor = (*listeners)[(r + 1) % nranks];
    const RootReply reply = successorReply(successor.address.storage, successor.nonce);
    EXPECT_EQ(rankSockets[r].sendAll(&reply, sizeof(reply), Deadline(10, nullptr)), ncclSuccess);
  }
  ranks.join();
  return all;
}

// A connection to a rank's listener opened as a rank would: a hello of `kind` from `rank`
// with `nonce`, proven under `secret` for that listener.
inline Socket provenPeer(const ListenerView& listener, uint64_t secret, int32_t rank, int32_t kind, uint64_t nonce) {
  const PeerHello hello = makePeerHello(bootstrapKey(secret), listener.nonce, nonce, rank, kind);
  return intruder(listener.address, &hello, sizeof(hello));
}

// Warnings for junk: catches WARNs (at NCCL_DEBUG=WARN) while it lives.
class WarnCatcher {
 public:
  WarnCatcher() {
    warns_ = 0;
    last_.clear();
    setenv("NCCL_DEBUG", "WARN", 1);  // the sink sees only what the level lets through
    resetDebugInit();
    setLogSink([](LogLevel level, uint64_t, const char*, int, const char* text) {
      if (level != LogLevel::Warn) return;
      std::lock_guard<std::mutex> lock(mutex_);
      ++warns_;
      last_ = text;
    });
  }
  ~WarnCatcher() {
    setLogSink(nullptr);
    unsetenv("NCCL_DEBUG");
    resetDebugInit();
  }
  int warns() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return warns_;
  }
  std::string last() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

 private:
  static inline std::mutex mutex_;
  static inline int warns_ = 0;
  static inline std::string last_;
};

// Twenty connections with the old clear-secret hello (padded to the new length): one WARN when the first is dropped,
// one summing up the rest when the root closes; not twenty.

}  // namespace chorus::bootstrap_testing
