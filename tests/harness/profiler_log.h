// What the test profiler plugin (tests/plugins/profiler_test_plugin.cc) recorded, read back
// and grouped by communicator: each init with its events and finalizes.
//
// The plugin writes <private dir>/profile.%p, so every process (each rank in process mode,
// the test process in thread mode) has its own file, its lines in call order. Construct a
// ProfilerLog before the communicators exist (see scoped_env.h).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "harness/scoped_env.h"

namespace chorus_test {

// One line: "start id=5 ctx=1 type=2 ..." -> op "start", fields {id: "5", ...}.
struct ProfilerRecord {
  std::string op;  // init, start, stop, state, finalize
  std::map<std::string, std::string> fields;
  std::string line;

  std::string field(const std::string& key) const;  // "" when absent
  long long number(const std::string& key) const;   // -1 when absent or not a number
};

// One started event, with what happened to it later in the same file.
struct ProfiledEvent {
  ProfilerRecord start;
  std::string id;
  int type = 0;
  size_t startAt = 0;                          // line index in its file
  size_t stopAt = std::string::npos;           // npos: never stopped
  std::vector<std::pair<size_t, int>> states;  // (line index, state)
  std::vector<ProfilerRecord> stateRecords;    // the same states' lines
  int stops = 0;
};

// One communicator: its init (a context of the plugin) and what was started in it.
struct ProfiledComm {
  ProfilerRecord init;
  std::string file;
  std::string ctx;
  int finalizes = 0;
  std::vector<ProfiledEvent> events;  // in start order

  std::vector<const ProfiledEvent*> ofType(int type) const;
  const ProfiledEvent* byId(const std::string& id) const;  // null when not in this communicator
};

class ProfilerLog {
 public:
  // Sets CHORUS_TEST_PROFILER_FILE in `env`.
  explicit ProfilerLog(ScopedEnv& env);
  ~ProfilerLog();  // deletes the files
  ProfilerLog(const ProfilerLog&) = delete;
  ProfilerLog& operator=(const ProfilerLog&) = delete;

  std::vector<std::string> files() const;
  std::vector<ProfilerRecord> records(const std::string& file) const;
  // Every init of every file, with the events started in its context. Lines that do not
  // parse, and events of an unknown context, are listed in `problems`.
  std::vector<ProfiledComm> comms(std::vector<std::string>* problems) const;

 private:
  std::string directory_;
};

}  // namespace chorus_test
