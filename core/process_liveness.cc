#include "core/process_liveness.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/debug.h"

namespace chorus {
namespace {

std::string fileName(uint64_t processId) {
  char name[64];
  snprintf(name, sizeof(name), "/chorus-alive-%016llx", static_cast<unsigned long long>(processId));
  return name;
}

// This process's file: its lock lasts as long as the process (the descriptor is never
// closed); a normal exit removes the name.
class OwnFile {
 public:
  explicit OwnFile(uint64_t processId) : name_(fileName(processId)) {
    fd_ = shm_open(name_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      WARN("Liveness: shm_open(%s) failed: %s; peers of this process will only notice its death by timeout",
           name_.c_str(), strerror(errno));
      return;
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      WARN("Liveness: flock(%s, LOCK_EX) failed: %s; peers of this process will only notice its death by timeout",
           name_.c_str(), strerror(errno));
      ::close(fd_);
      fd_ = -1;
      shm_unlink(name_.c_str());
    }
  }
  ~OwnFile() {
    if (fd_ >= 0) shm_unlink(name_.c_str());
  }
  bool ok() const { return fd_ >= 0; }

 private:
  std::string name_;
  int fd_ = -1;
};

}  // namespace

bool announceThisProcess(uint64_t processId) {
  static const OwnFile file(processId);
  return file.ok();
}

int openPeerLiveness(uint64_t processId) { return shm_open(fileName(processId).c_str(), O_RDONLY | O_CLOEXEC, 0); }

void closePeerLiveness(int fd) {
  if (fd >= 0) ::close(fd);
}

bool peerAlive(int fd, uint64_t processId) {
  if (fd < 0) return true;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) return true;  // EWOULDBLOCK: the owner holds it
  flock(fd, LOCK_UN);
  shm_unlink(fileName(processId).c_str());  // the owner cannot remove it any more
  return false;
}

}  // namespace chorus
