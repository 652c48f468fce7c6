#include "core/process_liveness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
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

// This process's file: its lock lasts as long as the process (the descriptor is never
// closed); a normal exit removes the name.
class OwnFile {
 public:
  explicit OwnFile(uint64_t processId) : name_(fileName(processTag(processId))) {
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
  for (const std::string& name : names) {
    if (name.rfind(prefix, 0) != 0) continue;
    const int fd = shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st;
    const bool old = fstat(fd, &st) == 0 && time(nullptr) - st.st_mtime > 10;
    const bool dead = old && flock(fd, LOCK_SH | LOCK_NB) == 0;
    close(fd);
    if (!dead) continue;
    removeFilesOf(name.substr(prefix.size()), names);
    INFO(kSubsysInit, "Liveness: removed what process %s left in /dev/shm when it died",
         name.substr(prefix.size()).c_str());
  }
}

bool announceThisProcess(uint64_t processId) {
  static const bool ok = [processId] {
    removeWhatDeadProcessesLeft();
    static const OwnFile file(processId);
    return file.ok();
  }();
  return ok;
}

int openPeerLiveness(uint64_t processId) {
  return shm_open(fileName(processTag(processId)).c_str(), O_RDONLY | O_CLOEXEC, 0);
}

void closePeerLiveness(int fd) {
  if (fd >= 0) ::close(fd);
}

bool peerAlive(int fd, uint64_t processId) {
  if (fd < 0) return true;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) return true;  // EWOULDBLOCK: the owner holds it
  flock(fd, LOCK_UN);
  removeFilesOf(processTag(processId), chorusFiles());  // the owner cannot remove them any more
  return false;
}

}  // namespace chorus
