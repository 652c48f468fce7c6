// How bootstrap connections prove the unique id's secret: intruders at the root and at rank
// listeners are dropped without harm, the secret never travels, proofs do not replay, and
// junk is summed up rather than warned one by one.

#include "tests/unit/bootstrap_fixture.h"

namespace chorus {
namespace {

using namespace bootstrap_testing;

// ---- intruders ----

TEST(BootstrapTest, IntrudersAtTheRootDoNotHarmTheCommunicator) {
  ncclUniqueId id;
  UniqueIdContents root = newRoot(&id);
  LegacyRootHello clearSecret{};  // the old hello: the right secret, in clear, and no proof
  clearSecret.secret = root.secret;
  clearSecret.rank = 0;
  clearSecret.nranks = 3;
  clearSecret.block = RootBlock{0, 3};
  clearSecret.listenAddress = loopbackAddress().storage;
  // Shorter than a RootHello: the root waits for the rest, and closes it with the other
  // pending connections once its ranks are answered.
  static_assert(sizeof(LegacyRootHello) < sizeof(RootHello));
  RootHello guessed{};  // the new layout with a proof that is not one
  guessed.rank = 0;
  guessed.nranks = 3;
  guessed.block = RootBlock{0, 3};
  guessed.listenAddress = loopbackAddress().storage;
  guessed.proof = root.secret;
  RootHello truncated = guessed;
  truncated.rank = 1;
  std::vector<char> garbage = randomBytes(500);
  std::vector<Socket> intruders;
  intruders.push_back(intruder(root.root, nullptr, 0));  // connects and says nothing
  intruders.push_back(intruder(root.root, &clearSecret, sizeof(clearSecret)));
  intruders.push_back(intruder(root.root, &guessed, sizeof(guessed)));
  intruders.push_back(intruder(root.root, garbage.data(), garbage.size()));
  {
    Socket shortReport = intruder(root.root, &truncated, sizeof(truncated) / 2);  // closes mid-report
  }
  // Right proof, rank out of range: dropped too, though a holder of the secret sent it.
  RootHello badRank = guessed;
  badRank.rank = 7;
  Socket provenBadRank = provenReport(root.root, root.secret, badRank);
  auto start = Clock::now();
  BootstrapList all = createAll(id, 3);
  ASSERT_FALSE(HasFailure());
  // The silent connection must not hold the root up until it is dropped.
  EXPECT_LT(secondsSince(start), kHelloTimeoutSeconds - 1.0);
  checkAllGather(all, 64);
  // None got an answer; those that sent a whole report were dropped at once.
  expectDropped(intruders[1], "the clear-secret hello", 1.0);
  expectDropped(intruders[0], "a silent connection", 1.0);
  expectDropped(intruders[2], "a guessed proof", 1.0);
  expectDropped(provenBadRank, "a proven report with a bad rank", 1.0);
}

TEST(BootstrapTest, IntrudersAtRankListenersDoNotHarmTheCommunicator) {
  const int nranks = 3;
  const uint64_t secret = 0x5ec4e75ec4e7ull;
  std::vector<ListenerView> listeners;
  std::vector<Socket> intruders;
  std::vector<char> garbage = randomBytes(300);
  BootstrapList all = createWithTestRoot(nranks, secret, &listeners, [&] {
    // Queued on every listener before the ranks start accepting their ring peers.
    for (int r = 0; r < nranks; ++r) {
      const int32_t predecessor = (r + nranks - 1) % nranks;
      LegacyWireHeader clearSecret{secret, predecessor, kWireRingHello, 0, 0, 0};  // the old ring hello
      PeerHello guessed{kPeerHelloMagic, predecessor, kWireRingHello, 1, secret};
      // Proven, but for another rank's listener (another nonce).
      const PeerHello elsewhere =
          makePeerHello(bootstrapKey(secret), listeners[(r + 1) % nranks].nonce, 2, predecessor, kWireRingHello);
      const SocketAddress& at = listeners[r].address;
      intruders.push_back(intruder(at, nullptr, 0));
      intruders.push_back(intruder(at, &clearSecret, sizeof(clearSecret)));
      intruders.push_back(intruder(at, &guessed, sizeof(guessed)));
      intruders.push_back(intruder(at, &elsewhere, sizeof(elsewhere)));
      intruders.push_back(intruder(at, garbage.data(), garbage.size()));
    }
  });
  ASSERT_FALSE(HasFailure());
  checkAllGather(all, 40);
  // After set-up, while rank 0 waits for point-to-point traffic (and so serves its listener):
  // the old forms are dropped, and so is a holder of the secret asking for a second ring
  // connection (rank 2, rank 0's predecessor, has one).
  std::atomic<bool> probed{false};
  std::thread prober([&] {
    LegacyWireHeader clearMessage{secret, 1, kWireP2pMessage, 5, 0, 4};
    Socket old = intruder(listeners[0].address, &clearMessage, sizeof(clearMessage));
    expectDropped(old, "a message header with the secret in clear");
    PeerHello guessed{kPeerHelloMagic, 1, kWireP2pHello, 3, secret ^ 1};
    Socket forged = intruder(listeners[0].address, &guessed, sizeof(guessed));
    expectDropped(forged, "a p2p hello with a guessed proof");
    Socket secondRing = provenPeer(listeners[0], secret, 2, kWireRingHello, 4);
    expectDropped(secondRing, "a second ring connection");
    intruders.push_back(intruder(listeners[0].address, garbage.data(), garbage.size()));
    probed = true;
  });
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    int v = rank + 100;
    if (rank != 0) {
      while (!probed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ASSERT_EQ(b.send(0, 5, &v, sizeof(v)), ncclSuccess);
    } else {
      for (int peer = 1; peer < nranks; ++peer) {
        ASSERT_EQ(b.recv(peer, 5, &v, sizeof(v)), ncclSuccess);
        EXPECT_EQ(v, peer + 100);
      }
    }
  });
  prober.join();
  checkAllGather(all, 8);
}

TEST(BootstrapTest, ARankDropsAConnectionThatNeverPresentsItself) {
  std::vector<ListenerView> listeners;
  std::vector<Socket> silent;
  BootstrapList all =
      createWithTestRoot(2, 42, &listeners, [&] { silent.push_back(intruder(listeners[0].address, nullptr, 0)); });
  ASSERT_FALSE(HasFailure());
  // Rank 0 keeps serving while it waits; the silent connection is closed after kHelloTimeoutSeconds.
  onEveryRank(all, [&](int rank, Bootstrap& b) {
    int v = 9;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kHelloTimeoutSeconds * 1000 + 700));
      ASSERT_EQ(b.send(0, 1, &v, sizeof(v)), ncclSuccess);
    } else {
      ASSERT_EQ(b.recv(1, 1, &v, sizeof(v)), ncclSuccess);
    }
  });
  expectDropped(silent[0], "a silent connection", 2.0);
}

TEST(BootstrapTest, TheSecretNeverTravelsAndProofsDoNotReplay) {
  const uint64_t secret = 0x8badf00ddeadbeefull;
  const SipKey key = bootstrapKey(secret);
  const Deadline patient(30, nullptr);
  Socket testRoot, rank1Listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &testRoot), ncclSuccess);
  ASSERT_EQ(Socket::listen(loopbackAddress(), &rank1Listener), ncclSuccess);
  const uint64_t rank1Nonce[2] = {0x2122232425262728ull, 0x3132333435363738ull};
  ncclUniqueId id;
  packUniqueId({secret, testRoot.address()}, &id);
  std::unique_ptr<Bootstrap> rank0;
  ncclResult_t created = ncclInternalError;
  std::thread rank0Thread([&] { created = Bootstrap::create(id, 0, 2, nullptr, &rank0); });
  std::string wire;  // all rank 0 sent
  auto take = [&](Socket& s, void* data, size_t size) {
    EXPECT_EQ(s.recvAll(data, size, patient), ncclSuccess);
    wire.append(static_cast<const char*>(data), size);
  };

  // The root: challenge, a proven report, the answer (rank 1, played here, is the successor).
  Socket fromRank0;
  ASSERT_EQ(testRoot.accept(patient, &fromRank0), ncclSuccess);
  const Challenge rootChallenge{kChallengeMagic, {0x0102030405060708ull, 0x1112131415161718ull}};
  ASSERT_EQ(fromRank0.sendAll(&rootChallenge, sizeof(rootChallenge), patient), ncclSuccess);
  RootHello report{};
  take(fromRank0, &report, sizeof(report));
  EXPECT_EQ(report.proof, rootHelloProof(key, rootChallenge, report));
  EXPECT_EQ(report.rank, 0);
  EXPECT_EQ(report.nranks, 2);
  ListenerView rank0At;
  ASSERT_TRUE(
      rank0At.address.assign(reinterpret_cast<const sockaddr*>(&report.listenAddress), sizeof(report.listenAddress)));
  rank0At.nonce[0] = report.listenNonce[0];
  rank0At.nonce[1] = report.listenNonce[1];
  const RootReply answer = successorReply(rank1Listener.address().storage, rank1Nonce);
  ASSERT_EQ(fromRank0.sendAll(&answer, sizeof(answer), patient), ncclSuccess);

  // Rank 0 opens the ring to rank 1, proven for the nonce the root passed on ...
  Socket ringIn;
  ASSERT_EQ(rank1Listener.accept(patient, &ringIn), ncclSuccess);
  PeerHello ringHello{};
  take(ringIn, &ringHello, sizeof(ringHello));
  EXPECT_EQ(ringHello.magic, kPeerHelloMagic);
  EXPECT_EQ(ringHello.rank, 0);
  EXPECT_EQ(ringHello.kind, kWireRingHello);
  EXPECT_EQ(ringHello.proof, peerHelloProof(key, rank1Nonce, ringHello));
  // ... and accepts rank 1's, proven for the nonce rank 0 announced.
  Socket ringOut = provenPeer(rank0At, secret, 1, kWireRingHello, 1001);
  // The all-gather of cards: one each way.
  PeerCard rank0Card{};
  take(ringIn, &rank0Card, sizeof(rank0Card));
  EXPECT_EQ(rank0Card.nonce[0], rank0At.nonce[0]);
  EXPECT_EQ(rank0Card.nonce[1], rank0At.nonce[1]);
  const PeerCard rank1Card{rank1Listener.address().storage, {rank1Nonce[0], rank1Nonce[1]}};
  ASSERT_EQ(ringOut.sendAll(&rank1Card, sizeof(rank1Card), patient), ncclSuccess);
  rank0Thread.join();
  ASSERT_EQ(created, ncclSuccess);

  // Rank 0 -> rank 1: a p2p connection, then a message. The send does not wait for rank 1.
  const std::string payload = "a message to rank 1";
  ASSERT_EQ(rank0->send(1, 7, payload.data(), payload.size()), ncclSuccess);
  Socket p2pIn;
  ASSERT_EQ(rank1Listener.accept(patient, &p2pIn), ncclSuccess);
  PeerHello p2pHello{};
  take(p2pIn, &p2pHello, sizeof(p2pHello));
  EXPECT_EQ(p2pHello.kind, kWireP2pHello);
  EXPECT_EQ(p2pHello.proof, peerHelloProof(key, rank1Nonce, p2pHello));
  EXPECT_NE(p2pHello.nonce, ringHello.nonce) << "each connection brings a nonce of its own";
  WireHeader header{};
  take(p2pIn, &header, sizeof(header));
  EXPECT_EQ(header.magic, kMessageMagic);
  EXPECT_EQ(header.rank, 0);
  EXPECT_EQ(header.kind, kWireP2pMessage);
  EXPECT_EQ(header.tag, 7);
  ASSERT_EQ(header.size, payload.size());
  std::string received(payload.size(), '\0');
  take(p2pIn, received.data(), received.size());
  EXPECT_EQ(received, payload);

  EXPECT_EQ(wire.size(),
            sizeof(RootHello) + 2 * sizeof(PeerHello) + sizeof(PeerCard) + sizeof(WireHeader) + payload.size());
  EXPECT_FALSE(containsSecret(wire, secret)) << "the secret went over the wire";
  EXPECT_FALSE(containsSecret(wire, __builtin_bswap64(secret))) << "the secret went over the wire, byte-swapped";

  // Rank 1 -> rank 0 over a p2p connection of the test's; then the same hello on a new
  // connection, and one proven for rank 1's listener, are refused while rank 0 keeps serving.
  int value = 0;
  ncclResult_t got = ncclInternalError;
  std::atomic<bool> tookEight{false};
  std::thread receiver([&] {
    got = rank0->recv(1, 8, &value, sizeof(value));
    tookEight = true;
    if (got == ncclSuccess) got = rank0->recv(1, 9, &value, sizeof(value));
  });
  const PeerHello mine = makePeerHello(key, rank0At.nonce, 2002, 1, kWireP2pHello);
  Socket p2pOut = intruder(rank0At.address, &mine, sizeof(mine));
  const int eight = 8;
  const WireHeader message{kMessageMagic, 1, kWireP2pMessage, 8, sizeof(eight)};
  ASSERT_EQ(p2pOut.sendAll(&message, sizeof(message), patient), ncclSuccess);
  ASSERT_EQ(p2pOut.sendAll(&eight, sizeof(eight), patient), ncclSuccess);
  while (!tookEight) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the original is taken
  EXPECT_EQ(value, 8);
  Socket copy = intruder(rank0At.address, &mine, sizeof(mine));
  expectDropped(copy, "a copied p2p hello");
  const PeerHello forRank1 = makePeerHello(key, rank1Nonce, 2003, 1, kWireP2pHello);
  Socket misdirected = intruder(rank0At.address, &forRank1, sizeof(forRank1));
  expectDropped(misdirected, "a hello proven for another listener");
  const int nine = 9;
  const WireHeader last{kMessageMagic, 1, kWireP2pMessage, 9, sizeof(nine)};
  ASSERT_EQ(p2pOut.sendAll(&last, sizeof(last), patient), ncclSuccess);
  ASSERT_EQ(p2pOut.sendAll(&nine, sizeof(nine), patient), ncclSuccess);
  receiver.join();
  EXPECT_EQ(got, ncclSuccess);
  EXPECT_EQ(value, 9);

  // A root refuses rank 0's report replayed to it: the proof was for another challenge.
  Socket listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
  const SocketAddress realRoot = listener.address();
  ncclResult_t rootResult = ncclInternalError;
  std::thread root([&] { rootResult = runBootstrapRoot(std::move(listener), secret, 3); });
  Socket replayedReport;
  ASSERT_EQ(Socket::connect(realRoot, patient, &replayedReport), ncclSuccess);
  ASSERT_EQ(replayedReport.sendAll(&report, sizeof(report), patient), ncclSuccess);
  const auto replayedAt = Clock::now();
  expectDropped(replayedReport, "a replayed report");
  EXPECT_LT(secondsSince(replayedAt), 1.5) << "dropped for its proof, not at the root's timeout";
  root.join();
  EXPECT_EQ(rootResult, ncclSuccess) << "no rank reached it: an unused id";
}

TEST(BootstrapTest, JunkAtARootIsSummedUpNotWarnedOneByOne) {
  Socket listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
  const SocketAddress rootAt = listener.address();
  const uint64_t secret = 0x1234;
  WarnCatcher catcher;
  // Outlives the loop (20 round trips, seconds on a loaded machine), ends before the summary's 10 s interval.
  std::thread root([&] { (void)runBootstrapRoot(std::move(listener), secret, 8); });
  LegacyRootHello clearSecret{};
  clearSecret.secret = secret;
  clearSecret.nranks = 2;
  clearSecret.block = RootBlock{0, 2};
  clearSecret.listenAddress = loopbackAddress().storage;
  for (int i = 0; i < 20; ++i) {
    clearSecret.rank = i % 2;
    std::vector<char> padded(sizeof(RootHello), 0);  // so that the root judges it at once
    memcpy(padded.data(), &clearSecret, sizeof(clearSecret));
    Socket junk = intruder(rootAt, padded.data(), padded.size());
    expectDropped(junk, "the clear-secret hello", 1.5);
  }
  EXPECT_EQ(catcher.warns(), 1) << catcher.last();
  root.join();
  EXPECT_EQ(catcher.warns(), 2) << catcher.last();
  EXPECT_NE(catcher.last().find("dropped 19 connection(s)"), std::string::npos) << catcher.last();
}

// A root whose ranks all reported closes its listener at once; nothing listens there after.

}  // namespace
}  // namespace chorus
