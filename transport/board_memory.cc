#include "transport/board_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/debug.h"
#include "core/file_descriptor.h"
#include "core/process_liveness.h"
#include "device/common/board.h"

namespace chorus {

namespace {

// Before the blocks: how many ranks other than rank 0 have mapped the segment.
struct alignas(kCacheLine) BoardHeader {
  uint32_t attached;
};

size_t blockBytes() { return boardBlockLayout().totalBytes(); }
size_t segmentBytes(int nranks) { return sizeof(BoardHeader) + static_cast<size_t>(nranks) * blockBytes(); }

std::string boardName(const PeerInfo& creator, uint64_t nonce) {
  char name[96];
  snprintf(name, sizeof(name), "/chorus-%s-board-%016llx", processTag(creator.processId).c_str(),
           static_cast<unsigned long long>(nonce));
  return name;
}

// One rank's view of one block: it keeps the segment mapped, and watches the block's rank's
// process (its liveness handle; -1 for this process's own ranks).
class BoardBlock : public ConnectionResource {
 public:
  BoardBlock(std::shared_ptr<BoardSegment> segment, int peerAlive)
      : segment_(std::move(segment)), peerAlive_(peerAlive) {}
  ~BoardBlock() override { closePeerLiveness(peerAlive_); }
  std::string describe() const override { return "the board in /dev/shm"; }

 private:
  std::shared_ptr<BoardSegment> segment_;
  int peerAlive_;
};

}  // namespace

class BoardSegment {
 public:
  BoardSegment(void* base, size_t bytes, std::string name) : base_(base), bytes_(bytes), name_(std::move(name)) {}
  ~BoardSegment() {
    if (!name_.empty()) shm_unlink(name_.c_str());  // ENOENT once the last rank removed it: fine
    munmap(base_, bytes_);
  }
  BoardSegment(const BoardSegment&) = delete;
  BoardSegment& operator=(const BoardSegment&) = delete;
  char* block(int rank) const {
    return static_cast<char*>(base_) + sizeof(BoardHeader) + static_cast<size_t>(rank) * blockBytes();
  }

 private:
  void* base_;
  size_t bytes_;
  std::string name_;  // rank 0's: the name it removes at the end
};

ncclResult_t createBoard(const PeerInfo& self, int nranks, std::shared_ptr<BoardSegment>* segment, uint64_t* nonce) {
  *nonce = 0;
  uint64_t drawn = 0;
  if (getrandom(&drawn, sizeof(drawn), 0) != sizeof(drawn)) drawn = reinterpret_cast<uintptr_t>(&drawn);
  drawn |= 1;  // 0 says "no board"
  const std::string name = boardName(self, drawn);
  const size_t bytes = segmentBytes(nranks);
  FileDescriptor fd(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    WARN("Board: shm_open(%s) failed: %s; small AllReduce calls run on the ring", name.c_str(), strerror(errno));
    return ncclSystemError;
  }
  if (const int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    shm_unlink(name.c_str());
    WARN("Board: posix_fallocate of %zu bytes on /dev/shm%s failed: %s; small AllReduce calls run on the ring", bytes,
         name.c_str(), strerror(err));
    return ncclSystemError;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    WARN("Board: mmap of %zu bytes of /dev/shm%s failed: %s; small AllReduce calls run on the ring", bytes,
         name.c_str(), strerror(errno));
    return ncclSystemError;
  }
  *segment = std::make_shared<BoardSegment>(base, bytes, name);
  *nonce = drawn;
  return ncclSuccess;
}

ncclResult_t openBoard(const PeerInfo& creator, uint64_t nonce, int nranks, std::shared_ptr<BoardSegment>* segment) {
  const std::string name = boardName(creator, nonce);
  const size_t bytes = segmentBytes(nranks);
  FileDescriptor fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    WARN("Board: shm_open(%s), rank 0's board, failed: %s", name.c_str(), strerror(errno));
    return ncclSystemError;
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    WARN("Board: %s, rank 0's board, is smaller than the %zu bytes of %d ranks' blocks", name.c_str(), bytes, nranks);
    return ncclInternalError;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    WARN("Board: mmap of %zu bytes of %s failed: %s", bytes, name.c_str(), strerror(errno));
    return ncclSystemError;
  }
  auto* header = static_cast<BoardHeader*>(base);
  if (__atomic_add_fetch(&header->attached, 1, __ATOMIC_ACQ_REL) == static_cast<uint32_t>(nranks - 1))
    shm_unlink(name.c_str());  // every rank has it mapped now
  *segment = std::make_shared<BoardSegment>(base, bytes, std::string());
  return ncclSuccess;
}

void attachBoardBlock(const std::shared_ptr<BoardSegment>& segment, const PeerInfo& self, const PeerInfo& peer,
                      FifoEnd* end, std::unique_ptr<ConnectionResource>* resource) {
  *end = FifoEnd{};
  end->attach(segment->block(peer.rank), boardBlockLayout());
  end->peer = peer.rank;
  end->sending = peer.rank == self.rank;
  int peerAlive = -1;
  if (peer.processId != self.processId) {
    end->peerPid = peer.pid;
    end->peerProcessId = peer.processId;
    peerAlive = openPeerLiveness(peer.processId);
    end->peerAlive = peerAlive;
  }
  *resource = std::make_unique<BoardBlock>(segment, peerAlive);
}

}  // namespace chorus
