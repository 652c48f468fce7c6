// The note link (transport/net/note_link.h): the side channel that relays where each end
// of a connection is over nets without notes. Notes go both ways with the count of messages
// before them, the newest wins, only a peer that proves the handle's key takes the link,
// and a malformed or closed link goes quiet without taking anything.
#include "transport/net/note_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "core/socket.h"
#include "transport/net/socket_net_wire.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<char> note(char fill) { return std::vector<char>(kNetNoteBytes, fill); }

// Takes from `link` until a note comes or 5 s pass; the last one taken, or empty.
std::vector<char> takeWithin5s(NoteLink& link, uint64_t* after) {
  std::vector<char> got(kNetNoteBytes), last;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); Clock::now() < deadline;) {
    if (link.take(got.data(), after)) return got;
  }
  return last;
}

SocketAddress addressOf(const NoteLinkHandle& handle) {
  SocketAddress address;
  EXPECT_TRUE(address.assign(reinterpret_cast<const sockaddr*>(handle.address), handle.addressLength));
  return address;
}

// A raw TCP client of the link's listener that sends a hello proving `key`.
Socket rawClient(const NoteLinkHandle& handle, const SipKey& key) {
  Socket socket;
  EXPECT_EQ(Socket::connect(addressOf(handle), Deadline(5, nullptr), &socket), ncclSuccess);
  const socket_net_wire::Hello hello = socket_net_wire::makeHello(key, 0x5eed, 0, 0);
  EXPECT_EQ(socket.sendAll(&hello, sizeof(hello), Deadline(5, nullptr)), ncclSuccess);
  return socket;
}

TEST(NoteLink, NotesTravelBothWaysWithTheirCountAndTheNewestWins) {
  NoteLinkHandle handle{};
  std::unique_ptr<NoteLink> receiver, sender;
  ASSERT_EQ(NoteLink::listen(&handle, &receiver), ncclSuccess);
  ASSERT_EQ(handle.magic, kNoteLinkMagic);
  ASSERT_EQ(NoteLink::connect(handle, kNetTrafficClassUndef, &sender), ncclSuccess);

  sender->send(note('A').data(), 3);
  uint64_t after = 0;
  EXPECT_EQ(takeWithin5s(*receiver, &after), note('A')) << "the sender's note did not arrive within 5 s";
  EXPECT_EQ(after, 3u) << "the note must say how many messages preceded it";
  std::vector<char> got(kNetNoteBytes);
  EXPECT_FALSE(receiver->take(got.data(), &after)) << "a note is taken once";

  // Back: two notes queued at once; the sender ends up with the newer, never the older after it.
  receiver->send(note('B').data(), 0);
  receiver->send(note('C').data(), 0);
  std::vector<char> last;
  for (auto deadline = Clock::now() + std::chrono::seconds(5); last != note('C') && Clock::now() < deadline;) {
    if (sender->take(got.data(), &after)) {
      EXPECT_TRUE(last != note('C') || got != note('B')) << "an older note replaced a newer one";
      last = got;
    }
  }
  EXPECT_EQ(last, note('C')) << "the receiver's newest note did not reach the sender within 5 s";
  EXPECT_TRUE(sender->alive());
  EXPECT_TRUE(receiver->alive());
}

// A local process that connects first without the handle's key does not take the link:
// the rank that holds the handle gets it.
TEST(NoteLink, AClientWithoutTheKeyDoesNotTakeTheLink) {
  NoteLinkHandle handle{};
  std::unique_ptr<NoteLink> receiver, sender;
  ASSERT_EQ(NoteLink::listen(&handle, &receiver), ncclSuccess);
  Socket forger = rawClient(handle, SipKey{handle.key[0] ^ 1, handle.key[1]});
  NoteFrame forged{kNoteFrameMagic, 0, {}};
  memset(forged.note, 'F', sizeof(forged.note));
  ASSERT_EQ(forger.sendAll(&forged, sizeof(forged), Deadline(5, nullptr)), ncclSuccess);
  std::vector<char> got(kNetNoteBytes);
  uint64_t after = 0;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(receiver->take(got.data(), &after)) << "the forger's note was taken";
  EXPECT_FALSE(receiver->connected()) << "the forger took the link";

  ASSERT_EQ(NoteLink::connect(handle, kNetTrafficClassUndef, &sender), ncclSuccess);
  sender->send(note('R').data(), 7);
  EXPECT_EQ(takeWithin5s(*receiver, &after), note('R')) << "the rank with the key did not get the link";
  EXPECT_EQ(after, 7u);
}

// A peer that proves the key but then sends a malformed frame, or closes, silences the link
// at this end: nothing more is taken from it, and nothing fails.
TEST(NoteLink, AMalformedFrameOrAClosedPeerSilencesTheLink) {
  for (bool malformed : {true, false}) {
    SCOPED_TRACE(malformed ? "malformed frame" : "peer closed");
    NoteLinkHandle handle{};
    std::unique_ptr<NoteLink> receiver;
    ASSERT_EQ(NoteLink::listen(&handle, &receiver), ncclSuccess);
    Socket peer = rawClient(handle, SipKey{handle.key[0], handle.key[1]});
    NoteFrame frame{malformed ? 0x0badull : kNoteFrameMagic, 1, {}};
    ASSERT_EQ(peer.sendAll(&frame, sizeof(frame), Deadline(5, nullptr)), ncclSuccess);
    if (!malformed) peer.close();
    std::vector<char> got(kNetNoteBytes);
    uint64_t after = 0;
    bool took = false;
    for (auto deadline = Clock::now() + std::chrono::seconds(5); receiver->alive() && Clock::now() < deadline;)
      took = receiver->take(got.data(), &after) || took;
    EXPECT_FALSE(receiver->alive()) << "the link did not notice within 5 s";
    EXPECT_EQ(took, !malformed) << "a well-formed note before the close is taken, a malformed one never";
    receiver->send(note('X').data(), 0);  // a silenced link takes sends without failing
    EXPECT_FALSE(receiver->take(got.data(), &after));
  }
}

TEST(NoteLink, AHandleThatIsNotALinksIsRefused) {
  NoteLinkHandle handle{};
  std::unique_ptr<NoteLink> sender;
  EXPECT_EQ(NoteLink::connect(handle, kNetTrafficClassUndef, &sender), ncclInvalidArgument);
  handle.magic = kNoteLinkMagic;
  handle.addressLength = 200;
  EXPECT_EQ(NoteLink::connect(handle, kNetTrafficClassUndef, &sender), ncclInvalidArgument);
  EXPECT_EQ(sender, nullptr);
}

}  // namespace
}  // namespace chorus
