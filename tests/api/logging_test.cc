// NCCL_DEBUG / NCCL_DEBUG_FILE behaviour. The library reads these once, at its
// first call, so every test runs in a fresh forked child that sets them first.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness/failure_log.h"
#include "harness/rank_launcher.h"
#include "nccl.h"

namespace chorus_test {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

// Both spellings NCCL might use for %h: the full host name, or up to the first dot.
std::vector<std::string> hostNameCandidates() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string full = host;
  std::vector<std::string> names = {full};
  if (size_t dot = full.find('.'); dot != std::string::npos) names.push_back(full.substr(0, dot));
  return names;
}

// Creates a 1-rank communicator, runs an AllReduce and one bad call (a WARN).
std::string exerciseLibrary() {
  ncclComm_t comm = nullptr;
  ncclResult_t init = ncclCommInitAll(&comm, 1, nullptr);
  if (init != ncclSuccess) return "ncclCommInitAll returned " + resultName(init);
  float value = 1;
  if (ncclAllReduce(&value, &value, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) return "AllReduce failed";
  if (ncclAllReduce(&value, &value, 1, static_cast<ncclDataType_t>(12), ncclSum, comm, nullptr) == ncclSuccess) {
    return "bad datatype accepted";
  }
  if (ncclCommDestroy(comm) != ncclSuccess) return "ncclCommDestroy failed";
  return "";
}

TEST(Logging, DebugFileWithHostAndPidHasNcclLineFormat) {
  RankOutcome outcome = runInChildProcess([] {
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_FILE", "/tmp/chorus-log-%h-%p.txt", 1);
    ncclResetDebugInit();  // in case this process already initialised logging before the fork
    std::string problem = exerciseLibrary();
    if (!problem.empty()) return RankOutcome::fail(problem);
    std::string path, text;
    for (const std::string& host : hostNameCandidates()) {
      std::string candidate = "/tmp/chorus-log-" + host + "-" + std::to_string(getpid()) + ".txt";
      if (access(candidate.c_str(), R_OK) == 0) {
        path = candidate;
        text = readFile(candidate);
      }
    }
    if (path.empty()) return RankOutcome::fail("no /tmp/chorus-log-<host>-" + std::to_string(getpid()) + ".txt");
    unlink(path.c_str());
    const std::regex infoLine(R"(^[^:]+:[0-9]+:[0-9]+ \[[0-9-]+\] NCCL INFO .*)");
    bool sawInfo = false, sawWarn = false;
    for (const std::string& line : lines(text)) {
      sawInfo |= std::regex_match(line, infoLine);
      sawWarn |= line.find("NCCL WARN") != std::string::npos && line.find(':') != std::string::npos;
    }
    if (!sawInfo) return RankOutcome::fail("no line in NCCL's INFO format in " + path + ":\n" + text);
    if (!sawWarn) return RankOutcome::fail("no NCCL WARN line for the bad datatype in " + path + ":\n" + text);
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

// Runs exerciseLibrary with stdout and stderr sent to a file; returns what was written.
std::string captureOutput(const std::string& path, std::string& problem) {
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) {
    problem = "cannot create " + path;
    return "";
  }
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  problem = exerciseLibrary();
  std::fflush(stdout);
  std::fflush(stderr);
  std::string text = readFile(path);
  unlink(path.c_str());
  return text;
}

TEST(Logging, VersionLevelPrintsNcclAndChorusVersion) {
  RankOutcome outcome = runInChildProcess([] {
    setenv("NCCL_DEBUG", "VERSION", 1);
    unsetenv("NCCL_DEBUG_FILE");
    ncclResetDebugInit();
    std::string problem;
    std::string text = captureOutput("/tmp/chorus-version-" + std::to_string(getpid()) + ".txt", problem);
    if (!problem.empty()) return RankOutcome::fail(problem);
    if (text.find("NCCL version 2.28") == std::string::npos || text.find("Chorus") == std::string::npos) {
      return RankOutcome::fail("NCCL_DEBUG=VERSION output lacks 'NCCL version 2.28' or 'Chorus':\n" + text);
    }
    if (text.find("NCCL INFO") != std::string::npos && text.find("NCCL INFO NCCL version") == std::string::npos) {
      return RankOutcome::fail("NCCL_DEBUG=VERSION printed INFO lines beyond the version:\n" + text);
    }
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

TEST(Logging, SilentWithoutNcclDebug) {
  RankOutcome outcome = runInChildProcess([] {
    unsetenv("NCCL_DEBUG");
    unsetenv("NCCL_DEBUG_FILE");
    ncclResetDebugInit();
    std::string problem;
    std::string text = captureOutput("/tmp/chorus-silent-" + std::to_string(getpid()) + ".txt", problem);
    if (!problem.empty()) return RankOutcome::fail(problem);
    if (text.find("NCCL INFO") != std::string::npos)
      return RankOutcome::fail("INFO lines without NCCL_DEBUG:\n" + text);
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

// A communicator given a name (ncclConfig_t.commName) is named in its lines and errors:
// its init's INFO lines, a refused call's WARN and ncclGetLastError; an unnamed one is not.
TEST(Logging, CommNameInTheCommunicatorsLinesAndErrors) {
  RankOutcome outcome = runInChildProcess([] {
    const std::string path = "/tmp/chorus-commname-" + std::to_string(getpid()) + ".log";
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
    ncclResetDebugInit();
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.commName = "trainer-dp0";
    ncclComm_t named = nullptr, plain = nullptr;
    if (ncclCommInitRankConfig(&named, 1, id, 0, &config) != ncclSuccess) return RankOutcome::fail("init failed");
    ncclGetUniqueId(&id);
    if (ncclCommInitRank(&plain, 1, id, 0) != ncclSuccess) return RankOutcome::fail("second init failed");
    float x = 0;
    ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(99), ncclSum, named, nullptr);
    const std::string namedError = ncclGetLastError(named);
    ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(99), ncclSum, plain, nullptr);
    const std::string plainError = ncclGetLastError(plain);
    ncclCommDestroy(named);
    ncclCommDestroy(plain);
    const std::string text = readFile(path);
    unlink(path.c_str());
    FailureLog log;
    if (namedError.rfind("comm \"trainer-dp0\": ", 0) != 0) log.add("named error: " + namedError);
    if (plainError.find("trainer-dp0") != std::string::npos || plainError.rfind("comm \"", 0) == 0)
      log.add("unnamed error: " + plainError);
    int namedWarns = 0, namedInit = 0;
    for (const std::string& line : lines(text)) {
      namedWarns += line.find("NCCL WARN comm \"trainer-dp0\": ncclAllReduce") != std::string::npos;
      namedInit += line.find("NCCL INFO comm \"trainer-dp0\": ") != std::string::npos &&
                   line.find("Init COMPLETE") != std::string::npos;
    }
    if (namedWarns != 1) log.add("WARN lines naming the communicator: " + std::to_string(namedWarns));
    if (namedInit != 1) log.add("Init COMPLETE lines naming it: " + std::to_string(namedInit));
    if (!log.empty()) return RankOutcome::fail(log.outcome().message + "\n" + text);
    return RankOutcome::pass();
  });
  EXPECT_TRUE(outcome.ok) << outcome.message;
}

}  // namespace
}  // namespace chorus_test
