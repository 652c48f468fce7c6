// A test tuner plugin, built once per ABI it exports (tests/CMakeLists.txt):
//   CHORUS_TEST_TUNER_V5    ncclTunerPlugin_v5 only          (libnccl-tuner-chorustest.so)
//   CHORUS_TEST_TUNER_ALL   v6, v5, v4 and v3: the newest wins (libnccl-tuner-chorustest6.so)
//   CHORUS_TEST_TUNER_V4    ncclTunerPlugin_v4 only          (libnccl-tuner-chorustest4.so)
//   CHORUS_TEST_TUNER_V3    ncclTunerPlugin_v3 only          (libnccl-tuner-chorustest3.so)
// Each table is named "chorustest-v<version>".
//
// What it does comes from CHORUS_TEST_TUNER_RULES, read at each init, items separated by
// commas:
//   force=<algo>/<proto>/<bytes>  AllReduce of at most <bytes>: that pair's cost becomes 0
//                                 (if it was offered), as real plugins force a choice
//   scale=<factor>                every offered cost is multiplied by <factor>
//   enable=<algo>/<proto>         that pair costs 0 for every call, offered or not
//   disable=all                   every entry becomes NCCL_ALGO_PROTO_IGNORE
//   foreign                       NVLS/Simple and PAT/LL cost 0 (algorithms Chorus lacks)
//   channels=<n>                  getCollInfo sets *nChannels = n
//   latency=<algo>/<us>           v5, v6 init: that algorithm's base latencies become <us>
//   fail=init | fail=getCollInfo  that call returns ncclInternalError
// algo: tree, ring; proto: ll, ll128, simple.
//
// Every call is appended as one line to the file CHORUS_TEST_TUNER_RECORD names (if set),
// so tests in other processes can count them:
//   init v<version> ctx <pid>:<n> nRanks <n> nNodes <n>
//        (v5, v6:) commId <hex> domains <n>/<min>/<max> ringSimple <baseLatency>/<NET hwLatency>
//   coll ctx <pid>:<n> func <ncclFunc_t> bytes <n> offered <algo>/<proto>;... channels <n>
//   destroy ctx <pid>:<n>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "src/tune/tuner_plugin_abi.h"

namespace {

const char* const kAlgoNames[NCCL_NUM_ALGORITHMS] = {"tree",     "ring", "collnetdirect", "collnetchain", "nvls",
                                                     "nvlstree", "pat"};
const char* const kProtoNames[NCCL_NUM_PROTOCOLS] = {"ll", "ll128", "simple"};

int indexOf(std::string_view name, const char* const* names, int count) {
  for (int i = 0; i < count; ++i)
    if (name == names[i]) return i;
  return -1;
}

struct Rules {
  int forceAlgo = -1;
  int forceProto = -1;
  size_t forceMaxBytes = 0;
  double scale = 1;
  int enableAlgo = -1;
  int enableProto = -1;
  bool disableAll = false;
  bool foreign = false;
  int channels = 0;
  int latencyAlgo = -1;
  double latencyUs = 0;
  bool failInit = false;
  bool failGetCollInfo = false;
};

Rules readRules() {
  Rules rules;
  const char* text = getenv("CHORUS_TEST_TUNER_RULES");
  std::string_view rest = text != nullptr ? text : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    char algo[32] = "";
    char proto[32] = "";
    size_t bytes = 0;
    double us = 0;
    if (sscanf(item.c_str(), "force=%31[^/]/%31[^/]/%zu", algo, proto, &bytes) == 3) {
      rules.forceAlgo = indexOf(algo, kAlgoNames, NCCL_NUM_ALGORITHMS);
      rules.forceProto = indexOf(proto, kProtoNames, NCCL_NUM_PROTOCOLS);
      rules.forceMaxBytes = bytes;
    } else if (sscanf(item.c_str(), "scale=%lf", &us) == 1) {
      rules.scale = us;
    } else if (sscanf(item.c_str(), "enable=%31[^/]/%31s", algo, proto) == 2) {
      rules.enableAlgo = indexOf(algo, kAlgoNames, NCCL_NUM_ALGORITHMS);
      rules.enableProto = indexOf(proto, kProtoNames, NCCL_NUM_PROTOCOLS);
    } else if (item == "disable=all") {
      rules.disableAll = true;
    } else if (item == "foreign") {
      rules.foreign = true;
    } else if (int channels = 0; sscanf(item.c_str(), "channels=%d", &channels) == 1) {
      rules.channels = channels;
    } else if (sscanf(item.c_str(), "latency=%31[^/]/%lf", algo, &us) == 2) {
      rules.latencyAlgo = indexOf(algo, kAlgoNames, NCCL_NUM_ALGORITHMS);
      rules.latencyUs = us;
    } else if (item == "fail=init") {
      rules.failInit = true;
    } else if (item == "fail=getCollInfo") {
      rules.failGetCollInfo = true;
    }
  }
  return rules;
}

// One line to the record file, in one write (O_APPEND keeps lines of several processes whole).
void record(const std::string& line) {
  const char* path = getenv("CHORUS_TEST_TUNER_RECORD");
  if (path == nullptr || path[0] == '\0') return;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  ssize_t written = write(fd, text.data(), text.size());
  (void)written;  // a test that misses the line fails on its own
  close(fd);
}

struct Context {
  std::string id;  // "<pid>:<n>"
  Rules rules;
};

std::atomic<int> contexts{0};

ncclResult_t initCommon(int version, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context,
                        const std::string& extra) {
  Rules rules = readRules();
  if (rules.failInit) return ncclInternalError;
  auto* ctx = new Context{std::to_string(getpid()) + ":" + std::to_string(++contexts), rules};
  *context = ctx;
  record("init v" + std::to_string(version) + " ctx " + ctx->id + " nRanks " + std::to_string(nRanks) + " nNodes " +
         std::to_string(nNodes) + extra);
  if (logFunction != nullptr) {
    logFunction(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "chorustest tuner v%d ready for %zu ranks", version,
                nRanks);
  }
  return ncclSuccess;
}

// The tables of every ABI are defined; each build exports some of them (the rest are unused).
ncclResult_t initV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                    ncclNvlDomainInfo_v5_t* domains, ncclTunerConstants_v5_t* constants, int version) {
  char extra[256];
  snprintf(extra, sizeof(extra), " commId %016llx domains %d/%d/%d ringSimple %g/%g",
           static_cast<unsigned long long>(commId), domains ? domains->nNvlDomains : -1,
           domains ? domains->minRanksPerNvlDomain : -1, domains ? domains->maxRanksPerNvlDomain : -1,
           constants ? constants->baseLatencies[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] : -1.0,
           constants ? constants->hwLatencies[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] : -1.0);
  const ncclResult_t result = initCommon(version, nRanks, nNodes, logFunction, context, extra);
  if (result != ncclSuccess) return result;
  const Rules& rules = static_cast<Context*>(*context)->rules;
  if (constants != nullptr && rules.latencyAlgo >= 0) {
    for (double& us : constants->baseLatencies[rules.latencyAlgo]) us = rules.latencyUs;
  }
  return ncclSuccess;
}

[[maybe_unused]] ncclResult_t initV5Table(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                                          ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* domains,
                                          ncclTunerConstants_v5_t* constants) {
  return initV5(context, commId, nRanks, nNodes, logFunction, domains, constants, 5);
}

[[maybe_unused]] ncclResult_t initV6Table(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                                          ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t* domains,
                                          ncclTunerConstants_v6_t* constants) {
  return initV5(context, commId, nRanks, nNodes, logFunction, domains, constants, 6);
}

[[maybe_unused]] ncclResult_t initV4Table(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  return initCommon(4, nRanks, nNodes, logFunction, context, "");
}

[[maybe_unused]] ncclResult_t initV3Table(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  return initCommon(3, nRanks, nNodes, logFunction, context, "");
}

ncclResult_t getCollInfo(void* context, ncclFunc_t collType, size_t nBytes, int /*numPipeOps*/, float** collCostTable,
                         int numAlgo, int numProto, int /*regBuff*/, int* nChannels) {
  auto* ctx = static_cast<Context*>(context);
  if (ctx == nullptr || numAlgo != NCCL_NUM_ALGORITHMS || numProto != NCCL_NUM_PROTOCOLS) return ncclInvalidArgument;
  auto* table = reinterpret_cast<float(*)[NCCL_NUM_PROTOCOLS]>(collCostTable);
  std::string offered;
  for (int a = 0; a < numAlgo; ++a) {
    for (int p = 0; p < numProto; ++p) {
      if (table[a][p] == NCCL_ALGO_PROTO_IGNORE) continue;
      if (!offered.empty()) offered += ';';
      offered.append(kAlgoNames[a]).append("/").append(kProtoNames[p]);
    }
  }
  record("coll ctx " + ctx->id + " func " + std::to_string(collType) + " bytes " + std::to_string(nBytes) +
         " offered " + (offered.empty() ? "-" : offered) + " channels " + std::to_string(*nChannels));
  const Rules& rules = ctx->rules;
  if (rules.failGetCollInfo) return ncclInternalError;
  if (rules.forceAlgo >= 0 && rules.forceProto >= 0 && collType == ncclFuncAllReduce && nBytes <= rules.forceMaxBytes &&
      table[rules.forceAlgo][rules.forceProto] != NCCL_ALGO_PROTO_IGNORE) {
    table[rules.forceAlgo][rules.forceProto] = 0.0f;
  }
  for (int a = 0; a < numAlgo; ++a) {
    for (int p = 0; p < numProto; ++p) {
      if (table[a][p] != NCCL_ALGO_PROTO_IGNORE) table[a][p] = static_cast<float>(table[a][p] * rules.scale);
    }
  }
  if (rules.enableAlgo >= 0 && rules.enableProto >= 0) table[rules.enableAlgo][rules.enableProto] = 0.0f;
  if (rules.foreign) {
    table[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] = 0.0f;
    table[NCCL_ALGO_PAT][NCCL_PROTO_LL] = 0.0f;
  }
  if (rules.disableAll) {
    for (int a = 0; a < numAlgo; ++a)
      for (int p = 0; p < numProto; ++p) table[a][p] = NCCL_ALGO_PROTO_IGNORE;
  }
  if (rules.channels > 0) *nChannels = rules.channels;
  return ncclSuccess;
}

[[maybe_unused]] ncclResult_t getCollInfoV3(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                            float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  return getCollInfo(context, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, 0, nChannels);
}

ncclResult_t destroy(void* context) {
  auto* ctx = static_cast<Context*>(context);
  if (ctx == nullptr) return ncclInvalidArgument;
  record("destroy ctx " + ctx->id);
  delete ctx;
  return ncclSuccess;
}

}  // namespace

#define CHORUS_TEST_EXPORT extern "C" __attribute__((visibility("default")))

#if defined(CHORUS_TEST_TUNER_ALL)
CHORUS_TEST_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {"chorustest-v6", initV6Table, getCollInfo, destroy,
                                                              nullptr};
#endif
#if defined(CHORUS_TEST_TUNER_V5) || defined(CHORUS_TEST_TUNER_ALL)
CHORUS_TEST_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {"chorustest-v5", initV5Table, getCollInfo, destroy};
#endif
#if defined(CHORUS_TEST_TUNER_V4) || defined(CHORUS_TEST_TUNER_ALL)
CHORUS_TEST_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {"chorustest-v4", initV4Table, getCollInfo, destroy};
#endif
#if defined(CHORUS_TEST_TUNER_V3) || defined(CHORUS_TEST_TUNER_ALL)
CHORUS_TEST_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {"chorustest-v3", initV3Table, getCollInfoV3, destroy};
#endif
