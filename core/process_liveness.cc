#include "core/process_liveness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"

namespace chorus {

std::string processTag(uint64_t processId) {
  char tag[24];
  snprintf(tag, sizeof(tag), "%016llx", static_cast<unsigned long long>(processId));
  return tag;
}

namespace {

std::string fileName(const std::string& tag) { return "/chorus-alive-" + tag; }

// A whole-file POSIX record lock of `type` (F_WRLCK, F_RDLCK or F_UNLCK), not waiting.
// POSIX locks belong to a process: a child made by fork() does not hold its parent's, so a
// dead rank whose forked children live on is still seen dead.
bool setLock(int fd, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  return fcntl(fd, F_SETLK, &lock) == 0;
}

// This process's file: its lock lasts as long as the process (the descriptor is never
// closed: closing any descriptor of the file would drop a POSIX lock); a normal exit of the
// process that made it removes the name (not that of a forked child, which inherits this
// object).
class OwnFile {
 public:
  explicit OwnFile(uint64_t processId) : name_(fileName(processTag(processId))), owner_(getpid()) {
    fd_ = shm_open(name_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      WARN("Liveness: shm_open(%s) failed: %s; peers of this process will only notice its death by timeout",
           name_.c_str(), strerror(errno));
      return;
    }
    if (!setLock(fd_, F_WRLCK)) {
      WARN(
          "Liveness: fcntl(%s, F_SETLK, F_WRLCK) failed: %s; peers of this process will only notice its death by "
          "timeout",
          name_.c_str(), strerror(errno));
      ::close(fd_);
      fd_ = -1;
      shm_unlink(name_.c_str());
    }
  }
  ~OwnFile() {
    if (fd_ >= 0 && getpid() == owner_) shm_unlink(name_.c_str());
  }
  OwnFile(const OwnFile&) = delete;
  OwnFile& operator=(const OwnFile&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  std::string name_;
  pid_t owner_;
  int fd_ = -1;
};

// This process's own tag once announced: never judged by this process (a POSIX lock never
// conflicts with its owner's, and closing a descriptor of the file would drop it).
std::mutex& ownTagMutex() {
  static std::mutex mutex;
  return mutex;
}
std::string& ownTag() {
  static std::string tag;
  return tag;
}

// The names in /dev/shm that start with "chorus-".
std::vector<std::string> chorusFiles() {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir))
    if (std::string(entry->d_name).rfind("chorus-", 0) == 0) names.push_back(entry->d_name);
  closedir(dir);
  return names;
}

// Removes what a dead process left in /dev/shm: its liveness file and its FIFO segments.
void removeFilesOf(const std::string& tag, const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (name.rfind("chorus-" + tag + "-", 0) == 0) shm_unlink(("/" + name).c_str());
  shm_unlink(fileName(tag).c_str());
}

}  // namespace

// Removes what processes that died without cleaning up left in /dev/shm. A liveness file
// younger than a few seconds is left alone: its process may not have locked it yet.
void removeWhatDeadProcessesLeft() {
  const std::string prefix = "chorus-alive-";
  const std::vector<std::string> names = chorusFiles();
  std::string own;
  {
    std::lock_guard<std::mutex> lock(ownTagMutex());
    own = ownTag();
  }
  for (const std::string& name : names) {
    if (name.rfind(prefix, 0) != 0 || (!own.empty() && name == prefix + own)) continue;
    const int fd = shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st;
    const bool old = fstat(fd, &st) == 0 && time(nullptr) - st.st_mtime > 10;
    const bool dead = old && setLock(fd, F_RDLCK);
    close(fd);
    if (!dead) continue;
    removeFilesOf(name.substr(prefix.size()), names);
    INFO(kSubsysInit, "Liveness: removed what process %s left in /dev/shm when it died",
         name.substr(prefix.size()).c_str());
  }
}

bool announceThisProcess(uint64_t processId) {
  // Once per process: a child made by fork() after its parent announced itself is a new
  // process (a new id), which needs a file and a lock of its own.
  static std::mutex mutex;
  static std::unique_ptr<OwnFile> file;
  static uint64_t announced = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (file != nullptr && announced == processId) return file->ok();
  if (file != nullptr) (void)file.release();  // the parent's, inherited: its name is not ours to remove
  {
    std::lock_guard<std::mutex> tagLock(ownTagMutex());
    ownTag().clear();  // a forked child: its parent's file is judged like any other
  }
  removeWhatDeadProcessesLeft();
  file = std::make_unique<OwnFile>(processId);
  announced = processId;
  std::lock_guard<std::mutex> tagLock(ownTagMutex());
  ownTag() = processTag(processId);
  return file->ok();
}

int openPeerLiveness(uint64_t processId) {
  return shm_open(fileName(processTag(processId)).c_str(), O_RDONLY | O_CLOEXEC, 0);
}

void closePeerLiveness(int fd) {
  if (fd >= 0) ::close(fd);
}

bool peerAlive(int fd, uint64_t processId) {
  if (fd < 0) return true;
  if (!setLock(fd, F_RDLCK)) return true;  // EAGAIN/EACCES: the owner holds it
  setLock(fd, F_UNLCK);
  removeFilesOf(processTag(processId), chorusFiles());  // the owner cannot remove them any more
  return false;
}

}  // namespace chorus
