// A test profiler plugin: records every init, startEvent, stopEvent, recordEventState and
// finalize it is given, one line each, so that tests can check what Chorus emits through a
// real dlopen'ed library built against NCCL's profiler ABI (src/profiler/profiler_abi.h).
//
// Built four ways (tests/CMakeLists.txt), by CHORUS_TEST_PROFILER_VERSION: 7 exports
// ncclProfiler_v7 and ncclProfiler_v4 (the loader must take v7); 6, 5 and 4 export only
// ncclProfiler_v6, _v5 or _v4.
//
// Environment:
//   CHORUS_TEST_PROFILER_FILE       where the lines go (appended); "%p" becomes the pid
//   CHORUS_TEST_PROFILER_MASK       the activation mask init returns (default 0x7fff: all)
//   CHORUS_TEST_PROFILER_FAIL_INIT  1: init fails with ncclSystemError (after its line)
// chorusTestProfilerSetMask(mask), exported, changes the mask at run time through the
// pointer init was given, as NCCL allows (its example plugin's exampleProfilerStart does).
//
// Lines, fields key=value (ids are this process's, from 1; 0 is null, ? a pointer that is
// no event of this plugin):
//   init ctx=ID version=V commName=S commHash=0xH nNodes=N nranks=N rank=N
//   start id=ID ctx=ID type=T parent=ID [parentGroup=ID] rank=N, then by type:
//     GroupApi(256)  groupDepth=N
//     CollApi(512)   func=S count=N datatype=S root=N [userTag=0xH]
//     P2pApi(1024)   func=S count=N datatype=S [userTag=0xH]
//     Coll(2)        func=S count=N datatype=S root=N seq=N algo=S proto=S nChannels=N sendBuff=P recvBuff=P
//                    [kernelVariant=S isSymColl=N userTag=0xH]
//     P2p(4)         func=S count=N datatype=S peer=N nChannels=N buff=P [userTag=0xH]
//     KernelCh(64)   channelId=N pTimer=N
//     ProxyOp(8)     pid=N channelId=N peer=N nSteps=N chunkSize=N isSend=N
//     ProxyStep(16)  step=N
//     ProxyCtrl(32)  (no fields)
//   ([...]: v7 only)
//   stop id=ID
//   state id=ID state=N [pTimer=N: KernelChStop(22)] [transSize=N: a ProxyStep state (8-12)]
//   finalize ctx=ID
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_set>

#include "src/profiler/profiler_abi.h"

namespace {

struct Context {
  uint64_t id;
};
struct Event {
  uint64_t id;
};

std::atomic<uint64_t> nextId{1};
std::mutex mutex;  // guards the file and `events`
FILE* file = nullptr;
// Every event handed out. Never freed: a parent is named after its own stop (a CollApi
// event ends before its Coll event starts), and a test plugin's few events cost nothing.
std::unordered_set<const void*> events;

std::string openPath;           // the path `file` was opened as
int* activationMask = nullptr;  // the latest init's

// Closes the file when the library is unloaded (the last communicator's finalize).
struct FileCloser {
  ~FileCloser() {
    if (file != nullptr) fclose(file);
  }
} fileCloser;

// The file CHORUS_TEST_PROFILER_FILE names now: a test that sets another one gets its own,
// even when the library stayed loaded since an earlier test.
void openFileLocked() {
  const char* pattern = getenv("CHORUS_TEST_PROFILER_FILE");
  std::string path = pattern != nullptr ? pattern : "";
  if (size_t at = path.find("%p"); at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  if (file != nullptr && path == openPath) return;
  if (file != nullptr) fclose(file);
  file = path.empty() ? nullptr : fopen(path.c_str(), "a");
  openPath = path;
}

void writeLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex);
  openFileLocked();
  if (file == nullptr) return;
  fputs(line.c_str(), file);
  fputc('\n', file);
  fflush(file);  // read by tests while the process runs (thread mode)
}

std::string text(const char* s) { return s == nullptr ? "(null)" : s; }

std::string pointer(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

std::string hex(uint64_t value) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
  return buf;
}

std::string eventId(const void* handle) {
  if (handle == nullptr) return "0";
  std::lock_guard<std::mutex> lock(mutex);
  if (events.count(handle) == 0) return "?";
  return std::to_string(static_cast<const Event*>(handle)->id);
}

template <int Version>
ncclResult_t initCommon(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                        int nranks, int rank, ncclDebugLogger_t logfn) {
  auto* ctx = new Context{nextId++};
  writeLine("init ctx=" + std::to_string(ctx->id) + " version=" + std::to_string(Version) +
            " commName=" + text(commName) + " commHash=" + hex(commHash) + " nNodes=" + std::to_string(nNodes) +
            " nranks=" + std::to_string(nranks) + " rank=" + std::to_string(rank));
  const char* fail = getenv("CHORUS_TEST_PROFILER_FAIL_INIT");
  if (fail != nullptr && std::string(fail) == "1") {
    delete ctx;
    return ncclSystemError;
  }
  const char* mask = getenv("CHORUS_TEST_PROFILER_MASK");
  *eActivationMask = mask != nullptr ? static_cast<int>(strtol(mask, nullptr, 0)) : 0x7fff;
  activationMask = eActivationMask;
  if (logfn != nullptr) logfn(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__, "chorustest profiler: context %p", ctx);
  *context = ctx;
  return ncclSuccess;
}

// v5, v6 and v7's init.
template <int Version>
ncclResult_t initNewer(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn) {
  return initCommon<Version>(context, eActivationMask, commName, commId, nNodes, nranks, rank, logfn);
}
template <int Version>
ncclResult_t initV4(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                    int nranks, int rank, ncclDebugLogger_t logfn) {
  return initCommon<Version>(context, eActivationMask, commName, commHash, nNodes, nranks, rank, logfn);
}

// The fields of the events Chorus emits, from a descriptor of any version.
template <typename Descr>
std::string describe(const Descr& d) {
  constexpr bool kV4 = std::is_same_v<Descr, ncclProfilerEventDescr_v4_t>;
  constexpr bool kV7 = std::is_same_v<Descr, ncclProfilerEventDescr_v7_t>;
  std::string s = " parent=" + eventId(d.parentObj);
  if constexpr (!kV4) {
    if (d.type == ncclProfileColl) s += " parentGroup=" + eventId(d.coll.parentGroup);
    if (d.type == ncclProfileP2p) s += " parentGroup=" + eventId(d.p2p.parentGroup);
  }
  s += " rank=" + std::to_string(d.rank);
  if (d.type == ncclProfileColl) {
    s += " func=" + text(d.coll.func) + " count=" + std::to_string(d.coll.count) +
         " datatype=" + text(d.coll.datatype) + " root=" + std::to_string(d.coll.root) +
         " seq=" + std::to_string(d.coll.seqNumber) + " algo=" + text(d.coll.algo) + " proto=" + text(d.coll.proto) +
         " nChannels=" + std::to_string(d.coll.nChannels) + " sendBuff=" + pointer(d.coll.sendBuff) +
         " recvBuff=" + pointer(d.coll.recvBuff);
  } else if (d.type == ncclProfileP2p) {
    s += " func=" + text(d.p2p.func) + " count=" + std::to_string(d.p2p.count) + " datatype=" + text(d.p2p.datatype) +
         " peer=" + std::to_string(d.p2p.peer) + " nChannels=" + std::to_string(d.p2p.nChannels) +
         " buff=" + pointer(d.p2p.buff);
  } else if (d.type == ncclProfileKernelCh) {
    s += " channelId=" + std::to_string(d.kernelCh.channelId) + " pTimer=" + std::to_string(d.kernelCh.pTimer);
  } else if (d.type == ncclProfileProxyOp) {
    s += " pid=" + std::to_string(d.proxyOp.pid) + " channelId=" + std::to_string(d.proxyOp.channelId) +
         " peer=" + std::to_string(d.proxyOp.peer) + " nSteps=" + std::to_string(d.proxyOp.nSteps) +
         " chunkSize=" + std::to_string(d.proxyOp.chunkSize) + " isSend=" + std::to_string(d.proxyOp.isSend);
  } else if (d.type == ncclProfileProxyStep) {
    s += " step=" + std::to_string(d.proxyStep.step);
  }
  if constexpr (!kV4) {
    if (d.type == ncclProfileGroupApi) {
      s += " groupDepth=" + std::to_string(d.groupApi.groupDepth);
    } else if (d.type == ncclProfileCollApi) {
      s += " func=" + text(d.collApi.func) + " count=" + std::to_string(d.collApi.count) +
           " datatype=" + text(d.collApi.datatype) + " root=" + std::to_string(d.collApi.root);
    } else if (d.type == ncclProfileP2pApi) {
      s += " func=" + text(d.p2pApi.func) + " count=" + std::to_string(d.p2pApi.count) +
           " datatype=" + text(d.p2pApi.datatype);
    }
  }
  if constexpr (kV7) {
    if (d.type == ncclProfileColl) {
      s += " kernelVariant=" + text(d.coll.kernelVariant) + " isSymColl=" + std::to_string(d.coll.isSymColl) +
           " userTag=" + hex(d.coll.userTag);
    } else if (d.type == ncclProfileP2p) {
      s += " userTag=" + hex(d.p2p.userTag);
    } else if (d.type == ncclProfileCollApi) {
      s += " userTag=" + hex(d.collApi.userTag);
    } else if (d.type == ncclProfileP2pApi) {
      s += " userTag=" + hex(d.p2pApi.userTag);
    }
  }
  return s;
}

template <typename Descr>
ncclResult_t startEvent(void* context, void** eHandle, Descr* eDescr) {
  auto* event = new Event{nextId++};
  const std::string fields = describe(*eDescr);  // before registering: a parent is never the event itself
  {
    std::lock_guard<std::mutex> lock(mutex);
    events.insert(event);
  }
  const uint64_t ctx = context != nullptr ? static_cast<Context*>(context)->id : 0;
  writeLine("start id=" + std::to_string(event->id) + " ctx=" + std::to_string(ctx) +
            " type=" + std::to_string(static_cast<uint64_t>(eDescr->type)) + fields);
  *eHandle = event;
  return ncclSuccess;
}

ncclResult_t stopEvent(void* eHandle) {
  writeLine("stop id=" + eventId(eHandle));
  return ncclSuccess;
}

template <typename Args>
ncclResult_t recordEventState(void* eHandle, ncclProfilerEventState_t eState, Args* args) {
  std::string line = "state id=" + eventId(eHandle) + " state=" + std::to_string(static_cast<int>(eState));
  if (eState == ncclProfilerKernelChStop && args != nullptr) line += " pTimer=" + std::to_string(args->kernelCh.pTimer);
  const bool stepState = eState >= ncclProfilerProxyStepSendGPUWait && eState <= ncclProfilerProxyStepRecvGPUWait;
  if (stepState && args != nullptr) line += " transSize=" + std::to_string(args->proxyStep.transSize);
  writeLine(line);
  return ncclSuccess;
}

ncclResult_t finalize(void* context) {
  auto* ctx = static_cast<Context*>(context);
  writeLine("finalize ctx=" + std::to_string(ctx->id));
  delete ctx;
  return ncclSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void chorusTestProfilerSetMask(int mask) {
  if (activationMask != nullptr) __atomic_store_n(activationMask, mask, __ATOMIC_RELAXED);
}

#define CHORUS_TEST_PROFILER_TABLE(V, initFunction)                                                 \
  __attribute__((visibility("default")))                                                            \
  ncclProfiler_v##V##_t ncclProfiler_v##V = {"chorustest-v" #V,                                     \
                                             initFunction,                                          \
                                             startEvent<ncclProfilerEventDescr_v##V##_t>,           \
                                             stopEvent,                                             \
                                             recordEventState<ncclProfilerEventStateArgs_v##V##_t>, \
                                             finalize};

#if CHORUS_TEST_PROFILER_VERSION == 7
CHORUS_TEST_PROFILER_TABLE(7, initNewer<7>)
CHORUS_TEST_PROFILER_TABLE(4, initV4<4>)
#elif CHORUS_TEST_PROFILER_VERSION == 6
CHORUS_TEST_PROFILER_TABLE(6, initNewer<6>)
#elif CHORUS_TEST_PROFILER_VERSION == 5
CHORUS_TEST_PROFILER_TABLE(5, initNewer<5>)
#elif CHORUS_TEST_PROFILER_VERSION == 4
CHORUS_TEST_PROFILER_TABLE(4, initV4<4>)
#else
#error "CHORUS_TEST_PROFILER_VERSION must be 4, 5, 6 or 7"
#endif

}  // extern "C"
