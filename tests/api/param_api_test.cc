// The parameter API (ncclParam*, NCCL 2.30) over Chorus' settings table, with NCCL's
// types, defaults and error codes; and the settings checks at init (unknown and
// not-honoured variables WARN, NCCL_DEBUG_SUBSYS=ENV prints the table).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness/fresh_process.h"
#include "harness/scoped_env.h"
#include "harness/tuning_log.h"
#include "nccl.h"

namespace chorus_test {
namespace {

// Each test runs in its own process (gtest_discover_tests), so the environment it sets stays there.
class ParamApi : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS",
          "NCCL_SET_THREAD_NAME", "NCCL_PARAM_DUMP_ALL", "NCCL_BUFFSIZE"})
      unsetenv(name);
  }
};

std::string joined(const TuningLogCapture& log) {
  std::string text;
  for (const std::string& line : log.lines()) text += line + "\n";
  return text;
}

ncclParamHandle_t bind(const char* key) {
  ncclParamHandle_t h = nullptr;
  EXPECT_EQ(ncclParamBind(&h, key), ncclSuccess) << key;
  return h;
}

TEST_F(ParamApi, PublicKeysAreListedOnce) {
  const char** keys = nullptr;
  int n = -1;
  ASSERT_EQ(ncclParamGetAllParameterKeys(&keys, &n), ncclSuccess);
  ASSERT_GE(n, 6);
  for (const char* want :
       {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_SET_THREAD_NAME", "NCCL_BUFFSIZE", "NCCL_SOCKET_IFNAME"}) {
    int hits = 0;
    for (int i = 0; i < n; ++i) hits += strcmp(keys[i], want) == 0;
    EXPECT_EQ(hits, 1) << want;
  }
  int tools = 0;
  for (int i = 0; i < n; ++i) tools += strcmp(keys[i], "CHORUS_STRESS_SEED") == 0;
  EXPECT_EQ(tools, 0) << "a tools-only setting is listed only with NCCL_PARAM_DUMP_ALL";
  setenv("NCCL_PARAM_DUMP_ALL", "1", 1);
  int all = 0;
  ASSERT_EQ(ncclParamGetAllParameterKeys(&keys, &all), ncclSuccess);
  EXPECT_GT(all, n);
  EXPECT_EQ(ncclParamGetAllParameterKeys(nullptr, &n), ncclInvalidArgument);
  EXPECT_EQ(ncclParamGetAllParameterKeys(&keys, nullptr), ncclInvalidArgument);
}

TEST_F(ParamApi, BindFindsOneHandlePerKey) {
  ncclParamHandle_t a = bind("NCCL_DEBUG_SUBSYS");
  ncclParamHandle_t b = bind("NCCL_DEBUG_SUBSYS");
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, bind("NCCL_DEBUG"));
  ncclParamHandle_t h = reinterpret_cast<ncclParamHandle_t>(0x1);
  EXPECT_EQ(ncclParamBind(&h, "NCCL_NO_SUCH_PARAMETER"), ncclInvalidArgument);
  EXPECT_EQ(h, reinterpret_cast<ncclParamHandle_t>(0x1)) << "a failed bind leaves the handle alone";
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_NO_SUCH_PARAMETER"), std::string::npos);
  EXPECT_EQ(ncclParamBind(&h, "nccl_debug"), ncclInvalidArgument) << "keys are case-sensitive";
  EXPECT_EQ(ncclParamBind(&h, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclParamBind(nullptr, "NCCL_DEBUG"), ncclInvalidArgument);
}

TEST_F(ParamApi, TypedGettersTakeTheParametersOwnType) {
  const char* str = nullptr;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  int32_t i32 = 0;
  int64_t i64 = 0;
  ncclParamHandle_t format = bind("NCCL_DEBUG_TIMESTAMP_FORMAT");
  ASSERT_EQ(ncclParamGetStr(format, &str), ncclSuccess);
  EXPECT_STREQ(str, "[%F %T] ");
  EXPECT_EQ(ncclParamGetU32(format, &u32), ncclInvalidArgument);
  ncclParamHandle_t levels = bind("NCCL_DEBUG_TIMESTAMP_LEVELS");
  ASSERT_EQ(ncclParamGetU32(levels, &u32), ncclSuccess);
  EXPECT_EQ(u32, 0x4u) << "WARN";
  EXPECT_EQ(ncclParamGetStr(levels, &str), ncclInvalidArgument);
  ncclParamHandle_t subsys = bind("NCCL_DEBUG_SUBSYS");
  ASSERT_EQ(ncclParamGetU64(subsys, &u64), ncclSuccess);
  EXPECT_EQ(u64, 0x1081u) << "INIT,ENV,BOOTSTRAP";
  EXPECT_EQ(ncclParamGetU32(subsys, &u32), ncclInvalidArgument);
  EXPECT_EQ(ncclParamGetI32(bind("NCCL_SET_THREAD_NAME"), &i32), ncclInvalidArgument);
  EXPECT_EQ(ncclParamGetI32(bind("NCCL_DEBUG"), &i32), ncclInvalidArgument);
  ncclParamHandle_t buffsize = bind("NCCL_BUFFSIZE");
  ASSERT_EQ(ncclParamGetI64(buffsize, &i64), ncclSuccess);
  EXPECT_EQ(i64, 4 << 20);
  EXPECT_EQ(ncclParamGetI32(buffsize, &i32), ncclInvalidArgument);
  EXPECT_EQ(ncclParamGetU64(nullptr, &u64), ncclInvalidArgument);
  EXPECT_EQ(ncclParamGetU64(subsys, nullptr), ncclInvalidArgument);
}

TEST_F(ParamApi, ValuesAreReadLiveFromTheEnvironment) {
  ncclParamHandle_t subsys = bind("NCCL_DEBUG_SUBSYS");
  setenv("NCCL_DEBUG_SUBSYS", "net,coll", 1);
  uint64_t u64 = 0;
  ASSERT_EQ(ncclParamGetU64(subsys, &u64), ncclSuccess);
  EXPECT_EQ(u64, 0x12u) << "COLL (0x2) and NET (0x10), NCCL's bits";
  const char* text = nullptr;
  int len = 0;
  ASSERT_EQ(ncclParamGetParameter("NCCL_DEBUG_SUBSYS", &text, &len), ncclSuccess);
  EXPECT_STREQ(text, "COLL,NET");
  setenv("NCCL_BUFFSIZE", "0x100000", 1);
  int64_t i64 = 0;
  ASSERT_EQ(ncclParamGetI64(bind("NCCL_BUFFSIZE"), &i64), ncclSuccess);
  EXPECT_EQ(i64, 1 << 20);
  setenv("NCCL_BUFFSIZE", "lots", 1);
  ASSERT_EQ(ncclParamGetI64(bind("NCCL_BUFFSIZE"), &i64), ncclSuccess);
  EXPECT_EQ(i64, 4 << 20) << "a value that is not a number reads as the default";
  setenv("NCCL_SET_THREAD_NAME", "yes", 1);
  ASSERT_EQ(ncclParamGetParameter("NCCL_SET_THREAD_NAME", &text, &len), ncclSuccess);
  EXPECT_STREQ(text, "TRUE");
}

TEST_F(ParamApi, RawBytesAndTextByKey) {
  unsigned char raw[64];
  int len = -7;
  ASSERT_EQ(ncclParamGet(bind("NCCL_SET_THREAD_NAME"), raw, sizeof raw, &len), ncclSuccess);
  EXPECT_EQ(len, 1);
  EXPECT_EQ(raw[0], 0);
  ncclParamHandle_t subsys = bind("NCCL_DEBUG_SUBSYS");
  ASSERT_EQ(ncclParamGet(subsys, raw, sizeof raw, &len), ncclSuccess);
  EXPECT_EQ(len, 8);
  uint64_t mask = 0;
  memcpy(&mask, raw, 8);
  EXPECT_EQ(mask, 0x1081u);
  ASSERT_EQ(ncclParamGet(bind("NCCL_DEBUG_TIMESTAMP_FORMAT"), raw, sizeof raw, &len), ncclSuccess);
  EXPECT_EQ(len, 9);
  EXPECT_EQ(raw[len - 1], 0) << "a string ends in its NUL";
  len = -7;
  EXPECT_EQ(ncclParamGet(subsys, raw, 4, &len), ncclInvalidArgument);
  EXPECT_EQ(len, 0) << "a buffer too small";
  len = -7;
  EXPECT_EQ(ncclParamGet(subsys, raw, 0, &len), ncclInvalidArgument);
  EXPECT_EQ(len, -7) << "maxLen 0 leaves len alone";

  const char* val = nullptr;
  int vl = -7;
  ASSERT_EQ(ncclParamGetParameter("NCCL_SET_THREAD_NAME", &val, &vl), ncclSuccess);
  EXPECT_STREQ(val, "FALSE");
  EXPECT_EQ(vl, 5);
  ASSERT_EQ(ncclParamGetParameter("NCCL_DEBUG_SUBSYS", &val, &vl), ncclSuccess);
  EXPECT_STREQ(val, "INIT,ENV,BOOTSTRAP");
  EXPECT_EQ(vl, 18);
  val = reinterpret_cast<const char*>(0x1);
  EXPECT_EQ(ncclParamGetParameter("NCCL_NO_SUCH", &val, &vl), ncclInvalidArgument);
  EXPECT_EQ(val, nullptr);
  EXPECT_EQ(vl, 0);
  EXPECT_EQ(ncclParamGetParameter(nullptr, &val, &vl), ncclInvalidArgument);
}

TEST_F(ParamApi, DumpPrintsTheRegistryToStdout) {
  fflush(stdout);
  FILE* tmp = tmpfile();
  ASSERT_NE(tmp, nullptr);
  const int saved = dup(1);
  dup2(fileno(tmp), 1);
  ncclParamDumpAll();
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  rewind(tmp);
  std::string text;
  char chunk[512];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, tmp)) > 0) text.append(chunk, n);
  fclose(tmp);
  EXPECT_EQ(text.find("=== ncclParam Registry Dump ==="), 0u) << text;
  EXPECT_NE(text.find("NCCL_DEBUG_SUBSYS (uint64_t): Current value=INIT,ENV,BOOTSTRAP default=INIT,ENV,BOOTSTRAP"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("NCCL_NVLS_ENABLE"), std::string::npos) << "not-honoured settings are listed, marked";
}

// Unknown and not-honoured variables get one WARN each at the first init; values NCCL
// would ignore silently.
TEST_F(ParamApi, InitWarnsAboutUnknownAndUnhonouredVariables) {
  if (!inFreshProcess()) return;  // the settings are reported at a process' first init
  ScopedEnv env;
  env.set("NCCL_SOCKET_IFNAMES", "lo");
  env.set("NCCL_NVLS_ENABLE", "1");
  env.set("NCCL_CUMEM_ENABLE", "0");          // asks for nothing Chorus lacks
  env.set("NCCL_TESTS_SPLIT_MASK", "0x1");    // nccl-tests' own
  env.set("NCCL_ASYNC_ERROR_HANDLING", "1");  // PyTorch's
  TuningLogCapture log(env, "INIT");
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  std::string text = joined(log);
  auto count = [&](const std::string& needle) {
    int hits = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++hits;
    return hits;
  };
  EXPECT_EQ(count("NCCL_SOCKET_IFNAMES is set but is not a setting Chorus knows (did you mean NCCL_SOCKET_IFNAME?)"), 1)
      << text;
  EXPECT_EQ(count("NCCL_NVLS_ENABLE=1 is not honoured by Chorus"), 1) << text;
  EXPECT_EQ(count("NCCL_CUMEM_ENABLE"), 0) << text;
  EXPECT_EQ(count("NCCL_TESTS_SPLIT_MASK"), 0) << text;
  EXPECT_EQ(count("NCCL_ASYNC_ERROR_HANDLING"), 0) << text;
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  ncclComm_t again[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(again, 2, nullptr), ncclSuccess);
  text = joined(log);
  EXPECT_EQ(count("NCCL_SOCKET_IFNAMES"), 1) << "once per process";
  for (ncclComm_t c : again) ncclCommDestroy(c);
}

// A number outside what a setting means (a negative timeout, a switch set to 7) is refused
// with a WARN naming the range, and the default is used; CHORUS_TIMEOUT=-1 turned the
// timeout off, and the switches took any non-zero value as on, without a word.
TEST_F(ParamApi, ValuesOutOfRangeAreRefusedNamingTheRange) {
  ScopedEnv env;
  env.set("CHORUS_TIMEOUT", "-1");
  env.set("CHORUS_FINGERPRINTS", "2");
  env.set("NCCL_MAX_NCHANNELS", "0");
  TuningLogCapture log(env, "INIT");
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  const std::string text = joined(log);
  EXPECT_NE(text.find("CHORUS_TIMEOUT=-1 is outside [0, 2147483647]; using the default 600"), std::string::npos)
      << text;
  EXPECT_NE(text.find("CHORUS_FINGERPRINTS=2 is outside [0, 1]; using the default 1"), std::string::npos) << text;
  EXPECT_NE(text.find("NCCL_MAX_NCHANNELS=0 is outside"), std::string::npos) << text;
  std::vector<std::vector<float>> data(2, std::vector<float>(32, 1.0f));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ncclAllReduce(data[r].data(), data[r].data(), 32, ncclFloat32, ncclSum, comms[r], nullptr);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << "the communicators work with the defaults";
  EXPECT_EQ(data[0], std::vector<float>(32, 2.0f));
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}

TEST_F(ParamApi, DebugSubsysEnvPrintsTheWholeTable) {
  if (!inFreshProcess()) return;  // the settings are reported at a process' first init
  ScopedEnv env;
  env.set("NCCL_STEPS", "4");
  TuningLogCapture log(env, "ENV");
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  const std::string text = joined(log);
  EXPECT_NE(text.find("NCCL_STEPS = 4 (environment;"), std::string::npos) << text;
  EXPECT_NE(text.find("NCCL_BUFFSIZE = 4194304 (default;"), std::string::npos) << text;
  EXPECT_NE(text.find("NCCL_GRAPH_FILE =  (default;"), std::string::npos) << text;
  ncclCommDestroy(comm);
}

TEST_F(ParamApi, WarnLinesStartWithTheTime) {
  ScopedEnv env;
  env.set("NCCL_DEBUG_TIMESTAMP_FORMAT", "<%Y> ");
  TuningLogCapture log(env, "INIT");
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 4, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  const std::string text = joined(log);
  const size_t warn = text.find("NCCL WARN");
  ASSERT_NE(warn, std::string::npos) << text;
  const size_t lineStart = text.rfind('\n', warn) == std::string::npos ? 0 : text.rfind('\n', warn) + 1;
  EXPECT_EQ(text[lineStart], '<') << text.substr(lineStart, warn - lineStart);
  EXPECT_NE(text.find(" NCCL INFO "), std::string::npos);
  for (size_t at = text.find("NCCL INFO"); at != std::string::npos; at = text.find("NCCL INFO", at + 1)) {
    const size_t start = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
    EXPECT_NE(text[start], '<') << "INFO lines carry no time by default";
  }
  ncclCommDestroy(comm);
}

}  // namespace
}  // namespace chorus_test
