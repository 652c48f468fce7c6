#include "harness/tuning_log.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace chorus_test {

TuningLogCapture::TuningLogCapture(ScopedEnv& env, const std::string& subsystems) {
  char pattern[] = "/tmp/chorus-tuning-XXXXXX";
  if (mkdtemp(pattern) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  directory_ = pattern;
  env.set("NCCL_DEBUG_SUBSYS", subsystems);
  env.set("NCCL_DEBUG_FILE", directory_ + "/log.%p");
  env.set("NCCL_DEBUG", "INFO");
}

TuningLogCapture::~TuningLogCapture() {
  clear();
  rmdir(directory_.c_str());
}

std::vector<std::string> TuningLogCapture::files() const {
  std::vector<std::string> names;
  if (DIR* dir = opendir(directory_.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, "log.", 4) == 0) names.push_back(directory_ + "/" + entry->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void TuningLogCapture::clear() const {
  if (!std::getenv("CHORUS_KEEP_TEST_LOGS"))
    for (const std::string& name : files()) unlink(name.c_str());
}

std::vector<std::string> TuningLogCapture::lines() const {
  std::vector<std::string> result;
  for (const std::string& name : files()) {
    std::ifstream in(name);
    for (std::string line; std::getline(in, line);) result.push_back(line);
  }
  return result;
}

std::vector<TuningChoice> TuningLogCapture::choices() const {
  std::vector<TuningChoice> result;
  for (const std::string& line : lines()) {
    TuningChoice choice;
    if (parseTuningChoice(line, &choice)) result.push_back(std::move(choice));
  }
  return result;
}

bool parseTuningChoice(const std::string& line, TuningChoice* choice) {
  static const char kMarker[] = " NCCL INFO ";
  const size_t marker = line.find(kMarker);
  if (marker == std::string::npos || line.find(" Bytes -> Algo ") == std::string::npos) return false;
  // Prefix "host:pid:tid [rank]": the host may not contain ':' (NCCL's format).
  int pid = 0, rank = -1;
  const size_t firstColon = line.find(':');
  if (firstColon == std::string::npos || std::sscanf(line.c_str() + firstColon, ":%d:%*d [%d]", &pid, &rank) != 2) {
    return false;
  }
  char collective[64] = {}, algo[32] = {}, proto[32] = {};
  size_t bytes = 0;
  double timeUs = 0;
  const char* body = line.c_str() + marker + std::strlen(kMarker);
  if (std::sscanf(body, "%63[^:]: %zu Bytes -> Algo %31s proto %31s time %lf us", collective, &bytes, algo, proto,
                  &timeUs) != 5) {
    return false;
  }
  *choice = TuningChoice{pid, rank, collective, bytes, algo, proto, timeUs, line};
  return true;
}

}  // namespace chorus_test
