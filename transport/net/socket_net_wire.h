// What the socket net puts on the wire, in host byte order (all ranks of a job share an
// architecture). Kept apart from the Net so that the comm, the listener and tests (which
// play misbehaving peers) share one definition of the format.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/keyed_hash.h"
#include "transport/net/net.h"

namespace chorus::socket_net_wire {

inline constexpr uint64_t kHandleMagic = 0x43484f5255534e48ull;  // "CHORUSNH"
inline constexpr uint64_t kHelloMagic = 0x43484f5255534e43ull;   // "CHORUSNC"
inline constexpr uint32_t kHeaderMagic = 0x4e4d5347u;            // "NMSG"
inline constexpr uint32_t kMaxDataSockets = 64;
inline constexpr size_t kMinChunkBytes = 64 << 10;

// The listen handle, which only the ranks of the communicator get (over its bootstrap).
// `key`: the listener's random key, which a connecting socket proves it knows. `connectId`
// is the sender's own progress (0 on the wire): connect() stores the id of its pending
// connection there between calls.
struct Handle {
  uint64_t magic;
  uint32_t dataSockets;
  uint32_t addressLength;
  uint8_t address[28];  // a sockaddr_in or sockaddr_in6
  uint64_t key[2];
  uint64_t connectId;
};
static_assert(sizeof(Handle) <= kNetHandleSize);

// First bytes on every socket of a connection: which connection and which socket
// (0: control, 1..dataSockets: data), and `proof` that the sender holds the listen handle:
// a keyed hash of the rest under the listener's key (the key itself never travels here).
// Each socket of a connection is accepted once, so a copied hello gains nothing.
struct Hello {
  uint64_t magic;
  uint64_t connectionId;
  uint32_t index;
  uint32_t dataSockets;
  uint64_t proof;
};

inline uint64_t helloProof(const SipKey& key, uint64_t connectionId, uint32_t index, uint32_t dataSockets) {
  const uint64_t words[3] = {kHelloMagic, connectionId, (uint64_t{index} << 32) | dataSockets};
  return sipHash24(key, words);
}
inline Hello makeHello(const SipKey& key, uint64_t connectionId, uint32_t index, uint32_t dataSockets) {
  return Hello{kHelloMagic, connectionId, index, dataSockets, helloProof(key, connectionId, index, dataSockets)};
}
inline SipKey keyOf(const Handle& handle) { return SipKey{handle.key[0], handle.key[1]}; }

// On the control socket before each message.
struct Header {
  uint32_t magic;
  uint32_t reserved;
  uint64_t size;
};

// A note (Net::sendNote) is a Header with this magic and size kNetNoteBytes, then the note:
// on the control socket between messages from the sender, and the other way from the
// receiver (that direction carries nothing else).
inline constexpr uint32_t kNoteMagic = 0x4e4e4f54u;  // "NNOT"
struct NoteFrame {
  Header header;
  uint8_t note[kNetNoteBytes];
};

// A message up to this size travels on the control socket right behind its header, and the
// data sockets carry nothing of it: one sendmsg() sends both, and the receiver waits on one
// socket. (Larger ones are cut by chunkRange; below kMinChunkBytes that is one data socket.)
inline constexpr size_t kInlineBytes = kMinChunkBytes;
constexpr bool travelsInline(uint64_t size) { return size <= kInlineBytes; }

// The bytes [begin, end) of a `size`-byte message that data socket `socket` carries.
struct ChunkRange {
  size_t begin;
  size_t end;
};

// Chunks of at least kMinChunkBytes, so that small messages use few sockets.
inline ChunkRange chunkRange(size_t size, uint32_t socket, uint32_t dataSockets) {
  size_t chunk = std::max(kMinChunkBytes, (size + dataSockets - 1) / dataSockets);
  size_t begin = std::min(size, socket * chunk);
  return {begin, std::min(size, begin + chunk)};
}

}  // namespace chorus::socket_net_wire
