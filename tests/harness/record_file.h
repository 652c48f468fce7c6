// A temporary file that a test plugin (tests/plugins) writes a line per call into, removed
// with the object. Header-only, so that the unit tests (static library) and the API tests
// (shared library) both use it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace chorus_test {

class RecordFile {
 public:
  // Made under /tmp, named from `stem`.
  explicit RecordFile(const std::string& stem) {
    std::string name = "/tmp/" + stem + "_XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd >= 0) close(fd);
    path_ = name;
  }
  ~RecordFile() { unlink(path_.c_str()); }
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  const std::string& path() const { return path_; }
  // The lines recorded so far that start with `prefix`.
  std::vector<std::string> lines(const std::string& prefix) const {
    std::vector<std::string> found;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(prefix, 0) == 0) found.push_back(line);
    return found;
  }

 private:
  std::string path_;
};

}  // namespace chorus_test
