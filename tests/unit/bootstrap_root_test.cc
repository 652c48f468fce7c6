// The bootstrap root: its protocol (duplicate and inconsistent reports, its timeout) and
// what a root costs (one thread for all of a process's roots, its socket only while needed).

#include "tests/harness/socket_count.h"
#include "tests/unit/bootstrap_fixture.h"

namespace chorus {
namespace {

using namespace bootstrap_testing;

// ---- the root protocol itself ----

// Plays ranks against a root of `nranks` ranks served on a thread of the test.
class RootUnderTest {
 public:
  RootUnderTest() {
    Socket listener;
    EXPECT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
    at_ = listener.address();
    thread_ = std::thread(
        [this, l = std::move(listener)]() mutable { result_ = runBootstrapRoot(std::move(l), kSecret, 30); });
  }
  ~RootUnderTest() {
    if (thread_.joinable()) thread_.join();
  }
  // A proven report of `rank` of `nranks` listening on `port`, in arrival order.
  Socket report(int rank, int nranks, uint16_t port) {
    RootHello hello{};
    hello.rank = rank;
    hello.nranks = nranks;
    hello.block = RootBlock{0, nranks};
    SocketAddress where = loopbackAddress();
    where.setPort(port);
    hello.listenAddress = where.storage;
    Socket s = provenReport(at_, kSecret, hello);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // keep the arrival order
    return s;
  }
  // Waits for the root to end; its result.
  ncclResult_t finish() {
    thread_.join();
    return result_;
  }
  const SocketAddress& at() const { return at_; }

 private:
  static constexpr uint64_t kSecret = 77;
  SocketAddress at_;
  ncclResult_t result_ = ncclInternalError;
  std::thread thread_;
};

// The port of the successor the root answered `s` with, or -1 when it refused.
int successorPort(Socket& s) {
  RootReply reply{};
  EXPECT_EQ(s.recvAll(&reply, sizeof(reply), Deadline(5, nullptr)), ncclSuccess);
  if (reply.refused) return -1;
  SocketAddress successor;
  successor.assign(reinterpret_cast<sockaddr*>(&reply.successorAddress), sizeof(reply.successorAddress));
  return successor.port();
}

// Why the root refused `s`, or "" when it answered with a successor.
std::string refusal(Socket& s) {
  RootReply reply{};
  EXPECT_EQ(s.recvAll(&reply, sizeof(reply), Deadline(5, nullptr)), ncclSuccess);
  return reply.refused ? std::string(reply.reason, strnlen(reply.reason, sizeof(reply.reason))) : "";
}

TEST(BootstrapTest, RootAnswersEachRankWithItsSuccessorAndDropsWhatProvesNothing) {
  RootUnderTest root;
  Socket first = root.report(0, 2, 1000);
  Socket noAddress = intruder(root.at(), nullptr, 0);  // connects and says nothing
  Socket second = root.report(1, 2, 4000);
  EXPECT_EQ(root.finish(), ncclSuccess);
  EXPECT_EQ(successorPort(first), 4000);
  EXPECT_EQ(successorPort(second), 1000);
  expectDropped(noAddress, "a silent connection", 1.0);
}

// Two proven reports that disagree: every rank, those before and those after, is told why at
// once, and the root ends as soon as each rank of the communicator was told.
TEST(BootstrapTest, RootRefusesEveryRankOnceTwoProcessesClaimOneRank) {
  RootUnderTest root;
  Socket first = root.report(0, 3, 1000);
  Socket duplicate = root.report(0, 3, 2000);
  const std::string why = refusal(first);
  EXPECT_NE(why.find("two processes were given rank 0 of 3"), std::string::npos) << why;
  EXPECT_NE(why.find("127.0.0.1"), std::string::npos) << "names where both came from: " << why;
  EXPECT_EQ(refusal(duplicate), why);
  Socket later = root.report(1, 3, 3000);
  EXPECT_EQ(refusal(later), why) << "a rank that reports after the conflict";
  Socket last = root.report(2, 3, 4000);
  EXPECT_EQ(refusal(last), why);
  const auto start = Clock::now();
  EXPECT_EQ(root.finish(), ncclInvalidUsage);
  EXPECT_LT(secondsSince(start), 5.0) << "every rank was told: the root need not wait for its timeout";
}

TEST(BootstrapTest, RootRefusesEveryRankWhenTheRankCountsDisagree) {
  RootUnderTest root;
  Socket first = root.report(0, 2, 1000);
  Socket mismatched = root.report(1, 3, 3000);
  const std::string why = refusal(first);
  EXPECT_NE(why.find("rank 1 (from 127.0.0.1"), std::string::npos) << why;
  EXPECT_NE(why.find("says the communicator has 3 ranks, earlier ranks said 2"), std::string::npos) << why;
  EXPECT_EQ(refusal(mismatched), why);
  Socket second = root.report(1, 2, 4000);
  EXPECT_EQ(refusal(second), why);
  EXPECT_EQ(root.finish(), ncclInvalidUsage);
}

// A root that one rank of two reached gives up with a WARN; one that no rank ever reached
// (an unused id) ends quietly.
TEST(BootstrapTest, RootGivesUpAfterItsTimeout) {
  Socket listener;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &listener), ncclSuccess);
  const SocketAddress rootAt = listener.address();
  RootHello hello{};
  hello.rank = 0;
  hello.nranks = 2;
  hello.block = RootBlock{0, 2};
  hello.listenAddress = loopbackAddress().storage;
  auto start = Clock::now();
  ncclResult_t result = ncclSuccess;
  clearLastError();  // the root's WARN comes from its own thread: read through to the process's last error
  // 2 s: the report's handshake must end within the root's timeout, on a loaded machine too.
  std::thread root([&] { result = runBootstrapRoot(std::move(listener), 1, 2); });
  Socket reporter = provenReport(rootAt, 1, hello);
  root.join();
  EXPECT_EQ(result, ncclSystemError);
  EXPECT_LT(secondsSince(start), 5.0);
  EXPECT_NE(strstr(lastErrorText(), "1 of 2 ranks"), nullptr) << lastErrorText();

  static std::atomic<int> warns{0};
  setenv("NCCL_DEBUG", "WARN", 1);  // the sink sees only what the level lets through
  resetDebugInit();
  setLogSink([](LogLevel level, uint64_t, const char*, int, const char*) { warns += level == LogLevel::Warn; });
  Socket unused;
  ASSERT_EQ(Socket::listen(loopbackAddress(), &unused), ncclSuccess);
  EXPECT_EQ(runBootstrapRoot(std::move(unused), 1, 1), ncclSuccess);
  setLogSink(nullptr);
  unsetenv("NCCL_DEBUG");
  resetDebugInit();
  EXPECT_EQ(warns.load(), 0) << "no WARN from a root nobody used";
}

// The test plays the root and rank 1 of 2, byte by byte as the protocol says, and records
// everything rank 0 sends on every connection: its report, its ring hello, its card in the
// all-gather, a p2p hello, a message. The secret is in none of it; rank 0 accepts the
// test's proven hellos; and a proof copied onto a new connection is refused.

TEST(BootstrapTest, ARootClosesAsSoonAsItsRanksAreAnswered) {
  ncclUniqueId id;
  UniqueIdContents root = newRoot(&id);
  BootstrapList all = createAll(id, 2);
  ASSERT_FALSE(HasFailure());
  bool listening = true;
  for (auto start = Clock::now(); listening && secondsSince(start) < 2.0;) {
    const int fd = ::socket(root.root.family(), SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    listening = ::connect(fd, root.root.sa(), root.root.length()) == 0;
    ::close(fd);
    if (listening) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(listening) << "the root at " << root.root.toString() << " still accepts connections";
}

// Fifty ids nobody uses: one thread serves all their roots (at most one more than before),
// and at their timeout each closes its listener, with no WARN.
TEST(BootstrapTest, UnusedIdsShareOneThreadAndCloseQuietlyAtTheirTimeout) {
  const int threadsBefore = chorus_test::threadsOfThisProcess();
  const int listenersBefore = chorus_test::listeningSockets();
  WarnCatcher catcher;
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "3", 1);  // the 50 must still be open when counted, on a loaded machine too
  std::vector<ncclUniqueId> ids(50);
  for (auto& id : ids) ASSERT_EQ(bootstrapGetUniqueId(&id), ncclSuccess);
  unsetenv("CHORUS_BOOTSTRAP_TIMEOUT");
  EXPECT_LE(chorus_test::threadsOfThisProcess(), threadsBefore + 1);
  EXPECT_GE(chorus_test::listeningSockets(), listenersBefore + 50);
  int listeners = chorus_test::listeningSockets();
  for (auto start = Clock::now(); listeners > listenersBefore && secondsSince(start) < 8.0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    listeners = chorus_test::listeningSockets();
  }
  EXPECT_LE(listeners, listenersBefore) << "the unused roots did not close at their 3 s timeout";
  EXPECT_LE(chorus_test::threadsOfThisProcess(), threadsBefore + 1);
  EXPECT_EQ(catcher.warns(), 0) << catcher.last();
}

// NCCL's spread of ranks over roots: balanced, the first roots one larger.

}  // namespace
}  // namespace chorus
