#include "harness/profiler_log.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace chorus_test {
namespace {

bool parseRecord(const std::string& line, ProfilerRecord* record) {
  std::istringstream in(line);
  if (!(in >> record->op)) return false;
  record->line = line;
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return false;
    record->fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return true;
}

}  // namespace

std::string ProfilerRecord::field(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

long long ProfilerRecord::number(const std::string& key) const {
  const std::string value = field(key);
  if (value.empty()) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 0);
  return *end == '\0' ? n : -1;
}

std::vector<const ProfiledEvent*> ProfiledComm::ofType(int type) const {
  std::vector<const ProfiledEvent*> found;
  for (const ProfiledEvent& e : events)
    if (e.type == type) found.push_back(&e);
  return found;
}

const ProfiledEvent* ProfiledComm::byId(const std::string& id) const {
  for (const ProfiledEvent& e : events)
    if (e.id == id) return &e;
  return nullptr;
}

ProfilerLog::ProfilerLog(ScopedEnv& env) {
  char pattern[] = "/tmp/chorus-profiler-XXXXXX";
  if (mkdtemp(pattern) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  directory_ = pattern;
  env.set("CHORUS_TEST_PROFILER_FILE", directory_ + "/profile.%p");
}

ProfilerLog::~ProfilerLog() {
  if (!std::getenv("CHORUS_KEEP_TEST_LOGS"))
    for (const std::string& name : files()) unlink(name.c_str());
  rmdir(directory_.c_str());
}

std::vector<std::string> ProfilerLog::files() const {
  std::vector<std::string> names;
  if (DIR* dir = opendir(directory_.c_str())) {
    while (dirent* entry = readdir(dir)) {
      if (std::strncmp(entry->d_name, "profile.", 8) == 0) names.push_back(directory_ + "/" + entry->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<ProfilerRecord> ProfilerLog::records(const std::string& file) const {
  std::vector<ProfilerRecord> result;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    ProfilerRecord record;
    if (!parseRecord(line, &record)) record = ProfilerRecord{"unparsed", {}, line};
    result.push_back(std::move(record));
  }
  return result;
}

std::vector<ProfiledComm> ProfilerLog::comms(std::vector<std::string>* problems) const {
  std::vector<ProfiledComm> result;
  for (const std::string& file : files()) {
    const size_t first = result.size();
    auto commOf = [&](const std::string& ctx) -> ProfiledComm* {
      for (size_t i = first; i < result.size(); ++i)
        if (result[i].ctx == ctx) return &result[i];
      return nullptr;
    };
    // Event ids are the process's: an event is found by id in any communicator of its file.
    auto eventOf = [&](const std::string& id) -> ProfiledEvent* {
      for (size_t i = first; i < result.size(); ++i)
        for (ProfiledEvent& e : result[i].events)
          if (e.id == id) return &e;
      return nullptr;
    };
    const std::vector<ProfilerRecord> lines = records(file);
    for (size_t at = 0; at < lines.size(); ++at) {
      const ProfilerRecord& r = lines[at];
      if (r.op == "init") {
        result.push_back(ProfiledComm{r, file, r.field("ctx"), 0, {}});
      } else if (r.op == "finalize") {
        if (ProfiledComm* c = commOf(r.field("ctx"))) {
          ++c->finalizes;
        } else {
          problems->push_back(file + ": finalize of an unknown context: " + r.line);
        }
      } else if (r.op == "start") {
        ProfiledComm* c = commOf(r.field("ctx"));
        if (c == nullptr) {
          problems->push_back(file + ": event of an unknown context: " + r.line);
          continue;
        }
        ProfiledEvent& e = c->events.emplace_back();
        e.start = r;
        e.id = r.field("id");
        e.type = static_cast<int>(r.number("type"));
        e.startAt = at;
      } else if (r.op == "stop" || r.op == "state") {
        ProfiledEvent* e = eventOf(r.field("id"));
        if (e == nullptr) {
          problems->push_back(file + ": " + r.op + " of an unknown event: " + r.line);
        } else if (r.op == "stop") {
          if (e->stops++ == 0) e->stopAt = at;
        } else {
          e->states.emplace_back(at, static_cast<int>(r.number("state")));
          e->stateRecords.push_back(r);
        }
      } else {
        problems->push_back(file + ": unexpected line: " + r.line);
      }
    }
  }
  return result;
}

}  // namespace chorus_test
