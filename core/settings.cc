#include "core/settings.h"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/debug.h"
#include "core/env.h"

extern char** environ;

namespace chorus {
namespace {

using enum SettingType;
using enum SettingUse;

// The table. README's environment tables list the same names (a test checks both ways).
constexpr Setting kSettings[] = {
    // Logging (NCCL's public parameters).
    {"NCCL_DEBUG", kDebugLevel, "NONE", kHonoured, "log level: VERSION, WARN, INFO, ABORT, TRACE"},
    {"NCCL_DEBUG_SUBSYS", kSubsysMask, "INIT,ENV,BOOTSTRAP", kHonoured,
     "subsystems logged at INFO: a list, ^ negates, ALL"},
    {"NCCL_DEBUG_FILE", kString, "", kHonoured, "log file instead of stderr; %h host name, %p pid"},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", kString, "[%F %T] ", kHonoured, "strftime format of the time a line starts with"},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", kLevelMask, "WARN", kHonoured, "levels whose lines start with the time"},
    {"NCCL_SET_THREAD_NAME", kBool, "FALSE", kHonoured, "name Chorus' threads (NCCL Proxy, NCCL Root, ...)"},
    {"NCCL_PARAM_DUMP_ALL", kBool, "FALSE", kHonoured, "ncclParamGetAllParameterKeys lists every setting"},
    {"NCCL_CONF_FILE", kString, "", kHonoured, "NAME=value file read before ~/.nccl.conf and /etc/nccl.conf"},
    // Bootstrap and communicators.
    {"NCCL_COMM_ID", kString, "", kHonoured, "host:port of a root that rank 0 starts"},
    {"NCCL_SOCKET_IFNAME", kString, "", kHonoured,
     "interfaces for bootstrap and sockets: prefixes, ^ excludes, = exact"},
    {"NCCL_SOCKET_FAMILY", kString, "", kHonoured, "AF_INET or AF_INET6"},
    {"NCCL_HOSTID", kString, "", kHonoured, "host identity (decides shared memory against network)"},
    {"NCCL_COMM_BLOCKING", kInt64, "1", kHonoured, "default of config.blocking"},
    {"NCCL_COMM_SPLIT_SHARE_RESOURCES", kInt64, "0", kHonoured,
     "default of config.splitShare (a CPU communicator's splits share its ring and tree connections)"},
    {"NCCL_COMM_SHRINK_SHARE_RESOURCES", kInt64, "0", kHonoured, "default of config.shrinkShare"},
    {"CHORUS_BOOTSTRAP_TIMEOUT", kInt64, "300", kHonoured, "seconds set-up may wait for other ranks"},
    {"CHORUS_TIMEOUT", kInt64, "600", kHonoured, "seconds a wait may see no progress (0 = never)"},
    {"CHORUS_WAIT_SLEEP_US", kInt64, "10000", kHonoured,
     "longest sleep of a waiting thread or the proxy before it checks abort and timeouts (0: never sleep)"},
    {"CHORUS_REPORT_SIGNAL", kString, "", kHonoured,
     "USR1, USR2 or a number: that signal makes every communicator write its hang report"},
    {"CHORUS_FINGERPRINTS", kInt64, "1", kHonoured,
     "0: steps do not carry their call's number and description (mismatched calls go undetected)"},
    {"NCCL_P2P_READ_ENABLE", kInt64, "-2", kHonoured,
     "1: GPU FIFOs' Simple slots on the sender's GPU (read by the receiver); 0: never; unset: NVLink Ampere pairs"},
    {"CHORUS_P2P_IN_PLACE", kInt64, "-1", kHonoured,
     "Send/Recv into a registered buffer written in place by the sender: -1 GPU communicators, 1 CPU ones too, 0 none"},
    {"CHORUS_BOARD", kInt64, "1", kHonoured,
     "0: small AllReduce calls of ranks sharing one host's /dev/shm run on the ring, not on the board in one hop"},
    {"CHORUS_DETERMINISTIC", kInt64, "0", kHonoured,
     "1: AllReduce, Reduce and ReduceScatter combine ranks in one order, bitwise reproducible results"},
    {"CHORUS_FAULT", kString, "", kHonoured,
     "faults to inject for tests: rank<R>:kill|stall|delay=<N>ms|break@<Kind>#<N>, ... (README)"},
    // Transports, channels, buffers.
    {"NCCL_P2P_DISABLE", kInt64, "0", kHonoured,
     "1: no in-process transport, and no FIFO in GPU memory (CUDA IPC included)"},
    {"NCCL_SHM_DISABLE", kInt64, "0", kHonoured, "1: no shared-memory transport"},
    {"NCCL_CUMEM_ENABLE", kInt64, "1", kHonoured,
     "0: GPU FIFO buffers other processes map are shared by legacy CUDA IPC handles, not cuMem file descriptors"},
    {"NCCL_P2P_LEVEL", kString, "", kHonoured,
     "farthest path (LOC, NVL, PIX, PXB, PHB, SYS or 0-4; default PXB) over which GPUs of one host write each "
     "other's FIFOs in GPU memory; farther pairs use host memory"},
    {"NCCL_NET_GDR_LEVEL", kString, "", kHonoured,
     "farthest path (LOC, PIX, PXB, PHB, SYS or 0-4; default PXB) between a GPU and the NIC that reads or writes "
     "a GPU communicator's network slots in its memory (GPUDirect RDMA, where the net takes GPU memory)"},
    {"NCCL_NET_GDR_READ", kInt64, "", kHonoured,
     "1: senders' network slots in GPU memory too (the NIC reads them); default 1 where the GPU's ring is NVLink"},
    {"NCCL_GDR_FLUSH_DISABLE", kInt64, "0", kHonoured,
     "1: data the NIC wrote into GPU memory is not flushed (cudaDeviceFlushGPUDirectRDMAWrites) before kernels read "
     "it"},
    {"NCCL_ALGO", kString, "", kHonoured, "algorithms allowed: Ring, Tree (lists, ^ excludes)"},
    {"NCCL_PROTO", kString, "", kHonoured, "protocols allowed: LL, LL128, Simple (lists, ^ excludes)"},
    {"NCCL_TUNER_PLUGIN", kString, "", kHonoured,
     "none, a name (libnccl-tuner-<name>.so) or a path; unset: libnccl-tuner.so, then the net plugin's library"},
    {"NCCL_MIN_NCHANNELS", kInt64, "1", kHonoured, "fewest channels"},
    {"NCCL_MAX_NCHANNELS", kInt64, "32", kHonoured, "most channels (default count: cores / local ranks)"},
    {"NCCL_BUFFSIZE", kInt64, "4194304", kHonoured, "Simple buffer of a ring/tree connection"},
    {"NCCL_LL_BUFFSIZE", kInt64, "524288", kHonoured, "LL buffer of a ring/tree connection"},
    {"NCCL_LL128_BUFFSIZE", kInt64, "4915200", kHonoured, "LL128 buffer of a ring/tree connection"},
    {"NCCL_STEPS", kInt64, "8", kHonoured, "slots per connection: a power of two, 2 to 16"},
    {"CHORUS_P2P_BUFFSIZE", kInt64, "1048576", kHonoured, "Simple buffer of a send/recv connection"},
    {"CHORUS_P2P_LL_BUFFSIZE", kInt64, "65536", kHonoured, "LL buffer of a send/recv connection"},
    {"CHORUS_P2P_LL128_BUFFSIZE", kInt64, "524288", kHonoured, "LL128 buffer of a send/recv connection"},
    // Network.
    {"NCCL_NET", kString, "", kHonoured, "Socket, IB or a plugin's net name"},
    {"NCCL_NET_PLUGIN", kString, "", kHonoured, "none, a name (libnccl-net-<name>.so) or a path"},
    {"NCCL_IB_DISABLE", kInt64, "0", kHonoured, "1: never use InfiniBand verbs"},
    {"NCCL_NSOCKS_PERTHREAD", kInt64, "1", kHonoured, "data sockets per socket-net thread"},
    {"NCCL_SOCKET_NTHREADS", kInt64, "1", kHonoured, "helper threads per socket-net connection"},
    {"NCCL_IB_HCA", kString, "", kHonoured, "HCAs: [^][=]dev[:port],..."},
    {"NCCL_IB_GID_INDEX", kInt64, "-1", kHonoured, "GID index (-1: a RoCE v2 IPv4-mapped GID, else v2, else v1)"},
    {"NCCL_IB_TC", kInt64, "0", kHonoured, "IB traffic class"},
    {"NCCL_IB_SL", kInt64, "0", kHonoured, "IB service level"},
    {"NCCL_IB_TIMEOUT", kInt64, "20", kHonoured, "IB retransmission timeout exponent"},
    {"NCCL_IB_RETRY_CNT", kInt64, "7", kHonoured, "IB retry count"},
    {"CHORUS_NET_STEPS", kInt64, "2", kHonoured, "slots of a network connection"},
    {"CHORUS_NET_NOTE_LINK", kInt64, "1", kHonoured,
     "1: over IB and net plugins, a TCP link per connection relays where each end is (mismatches fail at once)"},
    // Topology.
    {"NCCL_TOPO_FILE", kString, "", kHonoured, "topology XML to load instead of detecting"},
    {"NCCL_TOPO_DUMP_FILE", kString, "", kHonoured, "write the topology XML here"},
    {"NCCL_TOPO_DUMP_FILE_RANK", kInt64, "0", kHonoured, "the rank that writes it"},
    {"NCCL_GRAPH_DUMP_FILE", kString, "", kHonoured, "write the chosen rings and trees as graph XML"},
    {"NCCL_GRAPH_DUMP_FILE_RANK", kInt64, "0", kHonoured, "the rank that writes it"},
    // CUDA.
    {"CHORUS_EXECUTOR", kString, "auto", kHonoured,
     "what runs new communicators: auto (the GPU where one can be used), cpu, gpu"},
    {"CHORUS_ALLOW_SHARED_GPU", kInt64, "0", kHonoured, "1: several ranks of a host may share one GPU"},
    {"CHORUS_CUDA_DRIVER_LIBRARY", kString, "libcuda.so.1", kHonoured, "the CUDA driver library to load"},
    // Profiling.
    {"NCCL_PROFILER_PLUGIN", kString, "", kHonoured,
     "none, a name (libnccl-profiler-<name>.so) or a path; unset tries libnccl-profiler.so"},
    // NCCL's, not honoured: each names why.
    {"NCCL_GRAPH_FILE", kString, "", kNotHonoured,
     "rings and trees come from Chorus' own search; a graph file is not read", ""},
    {"NCCL_NTHREADS", kInt64, "512", kNotHonoured, "the CUDA kernels' block size is fixed", ""},
    {"NCCL_LAUNCH_MODE", kString, "", kNotHonoured, "a group's work is always launched per communicator", ""},
    {"NCCL_NVLS_ENABLE", kInt64, "0", kNotHonoured, "there is no NVLink SHARP algorithm", "0"},
    {"NCCL_COLLNET_ENABLE", kInt64, "0", kNotHonoured, "there is no CollNet algorithm", "0"},
    {"NCCL_CROSS_NIC", kInt64, "2", kNotHonoured, "rings are not placed per NIC", ""},
    {"NCCL_IB_QPS_PER_CONNECTION", kInt64, "1", kNotHonoured, "one queue pair per IB connection", "1"},
    {"NCCL_NCHANNELS_PER_NET_PEER", kInt64, "2", kNotHonoured, "send/recv use one connection per peer", ""},
    {"NCCL_PXN_DISABLE", kInt64, "0", kNotHonoured, "there is no PXN (NVLink-then-network) path", "1"},
    {"NCCL_IGNORE_CPU_AFFINITY", kInt64, "0", kNotHonoured, "Chorus does not set CPU affinity", "0,1"},
    {"NCCL_CHECK_POINTERS", kInt64, "0", kNotHonoured, "pointers are always checked", "0,1"},
    // Read by PyTorch (its older names of TORCH_NCCL_*), not by NCCL: never warned about.
    {"NCCL_ASYNC_ERROR_HANDLING", kString, "", kOtherSoftware, "PyTorch's"},
    {"NCCL_BLOCKING_WAIT", kString, "", kOtherSoftware, "PyTorch's"},
    {"NCCL_DESYNC_DEBUG", kString, "", kOtherSoftware, "PyTorch's"},
    {"NCCL_ENABLE_TIMING", kString, "", kOtherSoftware, "PyTorch's"},
    // Read by Chorus' tools and tests.
    {"CHORUS_PERF_MEMORY", kString, "", kTools, "the perf tools' buffers: host, device, managed"},
    {"CHORUS_TEST_MAX_COUNT", kInt64, "0", kTools, "the collective tests' largest count"},
    {"CHORUS_TEST_REDUCED_MATRIX", kInt64, "0", kTools, "1: the collective tests run a reduced matrix"},
    {"CHORUS_STRESS_SEED", kInt64, "0", kTools, "the stress test's seed"},
    {"CHORUS_LIBRARY_DIR", kString, "", kTools, "where the ABI tests find libnccl.so.2"},
    {"CHORUS_KEEP_TEST_LOGS", kInt64, "0", kTools, "1: tests keep their log files"},
    {"CHORUS_TEST_TUNER_RULES", kString, "", kTools, "what the test tuner plugin does to the cost tables"},
    {"CHORUS_TEST_TUNER_RECORD", kString, "", kTools, "the file the test tuner plugin records its calls in"},
    {"CHORUS_TEST_PROFILER_FILE", kString, "", kTools, "where the test profiler plugin writes its events (%p: pid)"},
    {"CHORUS_TEST_PROFILER_MASK", kInt64, "32767", kTools, "the activation mask of the test profiler plugin"},
    {"CHORUS_TEST_PROFILER_FAIL_INIT", kInt64, "0", kTools, "1: the test profiler plugin's init fails"},
};

std::optional<std::string> parseBool(const std::string& v) {
  for (const char* t : {"1", "true", "yes", "on", "y", "t"})
    if (strcasecmp(v.c_str(), t) == 0) return "TRUE";
  for (const char* f : {"0", "false", "no", "off", "n", "f"})
    if (strcasecmp(v.c_str(), f) == 0) return "FALSE";
  return std::nullopt;
}

// The value in canonical text, or nullopt when it is not valid for the type.
std::optional<std::string> canonical(SettingType type, const std::string& v) {
  switch (type) {
    case kBool:
      return parseBool(v);
    case kInt64:
      if (auto n = parseIntSetting(v)) return std::to_string(*n);
      return std::nullopt;
    case kString:
      return v;
    case kDebugLevel:
      if (parseLogLevel(v.c_str()) == LogLevel::None && strcasecmp(v.c_str(), "NONE") != 0) return std::nullopt;
      return logLevelName(parseLogLevel(v.c_str()));
    case kSubsysMask:
      return subsysNames(parseSubsysList(v.c_str()));
    case kLevelMask:
      return levelNames(parseLevelList(v.c_str()));
  }
  return std::nullopt;
}

// Edit distance, to name the setting a typo most likely meant.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

void warnUnknown(std::string_view name) {
  const Setting* closest = nullptr;
  size_t best = 4;  // more edits than this is not a typo
  for (const Setting& s : kSettings) {
    const size_t d = editDistance(name, s.name);
    if (d < best) best = d, closest = &s;
  }
  const std::string n(name);
  if (closest) {
    WARN("%s is set but is not a setting Chorus knows (did you mean %s?); it has no effect", n.c_str(), closest->name);
  } else {
    WARN("%s is set but is not a setting Chorus knows; it has no effect", n.c_str());
  }
}

const char* sourceOf(const Setting& s) {
  if (getenv(s.name)) return "environment";
  return envValue(s.name) ? "conf file" : "default";
}

}  // namespace

std::span<const Setting> allSettings() { return kSettings; }

const Setting* findSetting(std::string_view name) {
  for (const Setting& s : kSettings)
    if (name == s.name) return &s;
  return nullptr;
}

const char* settingTypeName(SettingType type) {
  switch (type) {
    case kBool:
      return "bool";
    case kInt64:
      return "int64_t";
    case kString:
      return "const char*";
    case kDebugLevel:
      return "ncclDebugLogLevel";
    case kSubsysMask:
      return "uint64_t";
    case kLevelMask:
      return "uint32_t";
  }
  return "?";
}

std::string settingText(const Setting& setting) {
  if (auto value = envValue(setting.name))
    if (auto text = canonical(setting.type, *value)) return *text;
  return canonical(setting.type, setting.defaultValue).value_or(setting.defaultValue);
}

std::string settingBytes(const Setting& setting) {
  const std::string text = settingText(setting);
  auto bytesOf = [](const auto& value) { return std::string(reinterpret_cast<const char*>(&value), sizeof(value)); };
  switch (setting.type) {
    case kBool:
      return std::string(1, text == "TRUE" ? '\1' : '\0');
    case kInt64:
      return bytesOf(static_cast<int64_t>(parseIntSetting(text).value_or(0)));
    case kString:
      return std::string(text.c_str(), text.size() + 1);
    case kDebugLevel:
      return bytesOf(static_cast<int32_t>(parseLogLevel(text.c_str())));
    case kSubsysMask:
      return bytesOf(parseSubsysList(text.c_str()));
    case kLevelMask:
      return bytesOf(parseLevelList(text.c_str()));
  }
  return {};
}

bool settingIsInert(const Setting& setting, const std::string& value) {
  if (setting.use != kNotHonoured) return true;
  if (value.empty() || setting.inertValues == nullptr) return value.empty();
  std::string_view list = setting.inertValues;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (item.size() == value.size() && strncasecmp(item.data(), value.data(), item.size()) == 0) return true;
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return false;
}

void reportSettingsOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (char** e = environ; e && *e; ++e) {
      const std::string_view entry(*e);
      const std::string_view name = entry.substr(0, entry.find('='));
      if (!name.starts_with("NCCL_") && !name.starts_with("CHORUS_")) continue;
      if (name.starts_with("NCCL_TESTS_")) continue;  // nccl-tests' own settings
      const Setting* s = findSetting(name);
      if (s == nullptr) {
        warnUnknown(name);
      } else if (const std::string value(entry.substr(name.size() + 1)); !settingIsInert(*s, value)) {
        WARN("%s=%s is not honoured by Chorus: %s", s->name, value.c_str(), s->meaning);
      } else if (s->use == kHonoured && !canonical(s->type, value)) {
        WARN("%s=%s is not a valid %s; the default %s is used", s->name, value.c_str(), settingTypeName(s->type),
             s->defaultValue);
      }
    }
    // The whole table when ENV is asked for by name; otherwise only what is set.
    const auto subsys = envValue("NCCL_DEBUG_SUBSYS");
    const bool wholeTable = subsys && !subsys->starts_with("^") && strcasestr(subsys->c_str(), "ENV") != nullptr;
    for (const Setting& s : kSettings) {
      if (s.use == kOtherSoftware || s.use == kTools) continue;
      const bool set = envValue(s.name).has_value();
      if (!set && !wholeTable) continue;
      INFO(kSubsysEnv, "%s = %s (%s; %s, default %s)%s", s.name, settingText(s).c_str(), sourceOf(s), s.meaning,
           s.defaultValue, s.use == kNotHonoured ? " [not honoured]" : "");
    }
  });
}

}  // namespace chorus
