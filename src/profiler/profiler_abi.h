// The C ABI of an NCCL profiler plugin (libnccl-profiler-<name>.so): the event type bits,
// event states, event descriptors and function tables of the versions Chorus loads,
// laid out as NCCL lays them out, so that a plugin built against NCCL's headers is
// loaded unchanged. Field order and types are an ABI and must not be edited.
//
// Which NCCL uses which table (NVIDIA/nccl src/include/plugin/profiler/profiler_v*.h):
//   ncclProfiler_v4   NCCL 2.27      8-bit type; init(ctx, mask, name, hash, ...)
//   ncclProfiler_v5   NCCL 2.28      64-bit type; API events; init(ctx, commId, mask, name, ...);
//                                    coll/p2p carry parentGroup (the v4 parent)
//   ncclProfiler_v6   NCCL 2.29-2.30 v5 plus copy-engine (CE) events after v5's union members
//   ncclProfiler_v7   NCCL 2.31-2.32 v6 with a per-call user tag appended to the API, coll and
//                                    p2p members, a coll's kernel variant, and kernel phase events
// v5, v6 and v7 share their shape (functions, and the union's members at offset 0, each
// newer one appending fields); v1-v3 (NCCL 2.23-2.26) differ and are not loaded.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/plugin_log.h"  // ncclDebugLogger_t
#include "nccl.h"

extern "C" {

// Symbols a plugin exports, newest first: the loader takes the first one it finds.
#define NCCL_PROFILER_SYMBOL_V7 "ncclProfiler_v7"
#define NCCL_PROFILER_SYMBOL_V6 "ncclProfiler_v6"
#define NCCL_PROFILER_SYMBOL_V5 "ncclProfiler_v5"
#define NCCL_PROFILER_SYMBOL_V4 "ncclProfiler_v4"

// Event types: a descriptor's `type`, and the bits of the activation mask a plugin's init
// returns. v4 knows bits 0-7 only.
enum {
  ncclProfileGroup = 1 << 0,          // a group's work on one communicator, as launched
  ncclProfileColl = 1 << 1,           // one collective, as launched
  ncclProfileP2p = 1 << 2,            // one send or receive, as launched
  ncclProfileProxyOp = 1 << 3,        // a network proxy operation of one channel
  ncclProfileProxyStep = 1 << 4,      // one network transfer of a proxy operation
  ncclProfileProxyCtrl = 1 << 5,      // the proxy thread's own activity (idle, sleep, append)
  ncclProfileKernelCh = 1 << 6,       // one channel of a GPU kernel
  ncclProfileNetPlugin = 1 << 7,      // an event a net plugin defines
  ncclProfileGroupApi = 1 << 8,       // v5: an outermost group as the user called it
  ncclProfileCollApi = 1 << 9,        // v5: one collective API call
  ncclProfileP2pApi = 1 << 10,        // v5: one ncclSend/ncclRecv API call
  ncclProfileKernelLaunch = 1 << 11,  // v5: one kernel launch
  ncclProfileCeColl = 1 << 12,        // v6: a copy-engine collective
  ncclProfileCeSync = 1 << 13,        // v6: a copy-engine synchronisation
  ncclProfileCeBatch = 1 << 14,       // v6: a copy-engine batch
  ncclProfileKernelPhase = 1 << 15,   // v7: a phase of a kernel's channel (needs KernelCh)
};

// State transitions recordEventState reports (one numbering for every version).
typedef enum {
  ncclProfilerProxyOpSendPosted = 0,
  ncclProfilerProxyOpSendRemFifoWait = 1,
  ncclProfilerProxyOpSendTransmitted = 2,
  ncclProfilerProxyOpSendDone = 3,
  ncclProfilerProxyOpRecvPosted = 4,
  ncclProfilerProxyOpRecvReceived = 5,
  ncclProfilerProxyOpRecvTransmitted = 6,
  ncclProfilerProxyOpRecvDone = 7,
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,  // v5: ncclGroupStart (or the call's implicit one) returned
  ncclProfilerGroupEndApiStart = 24,   // v5: ncclGroupEnd (or the call's implicit one) began
  ncclProfilerCeCollStart = 25,
  ncclProfilerCeCollComplete = 26,
  ncclProfilerCeSyncStart = 27,
  ncclProfilerCeSyncComplete = 28,
  ncclProfilerCeBatchStart = 29,
  ncclProfilerCeBatchComplete = 30,
  ncclProfilerKernelPhaseStop = 31,  // v7
} ncclProfilerEventState_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v4_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v5_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v6_t;
typedef ncclProfilerEventState_t ncclProfilerEventState_v7_t;

typedef pid_t ncclPid_t;

// Attribute updates that come with a state transition (the same union in v4 to v7; v7's
// kernel phase stop uses kernelCh).
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v4_t;
typedef ncclProfilerEventStateArgs_v4_t ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;
typedef ncclProfilerEventStateArgs_v6_t ncclProfilerEventStateArgs_v7_t;

// The members of a descriptor's union, by event, named so that v4, v5 and v6 share them
// where their layouts agree (a named struct lays out as the anonymous one NCCL writes).
typedef struct {
  ncclPid_t pid;  // the process that made the operation (a parent from another process is not one's own)
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
} ncclProfilerProxyOpDescr_t;
typedef struct {
  int step;
} ncclProfilerProxyStepDescr_t;
typedef struct {
  uint8_t channelId;
  uint64_t pTimer;  // the GPU's global timer at the start
} ncclProfilerKernelChDescr_t;
typedef struct {
  int64_t id;  // the net plugin's type and version of `data`
  void* data;
} ncclProfilerNetPluginDescr_t;

// --- v4 (NCCL 2.27) ---

typedef struct {
  uint8_t type;     // one ncclProfile* bit
  void* parentObj;  // the parent's handle: a coll's or p2p's is its group event
  int rank;         // the rank the event belongs to
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    ncclProfilerProxyOpDescr_t proxyOp;
    ncclProfilerProxyStepDescr_t proxyStep;
    ncclProfilerKernelChDescr_t kernelCh;
    ncclProfilerNetPluginDescr_t netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v4_t eState,
                                   ncclProfilerEventStateArgs_v4_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

// --- v5 (NCCL 2.28) and v6 (NCCL 2.29-2.30) ---

typedef struct {
  bool graphCaptured;
  int groupDepth;  // 1: the implicit group of a lone call; 2 and more: inside the user's ncclGroupStart
} ncclProfilerGroupApiDescr_t;
typedef struct {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
} ncclProfilerCollApiDescr_v5_t;
typedef struct {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
} ncclProfilerP2pApiDescr_v5_t;
typedef struct {
  void* stream;
} ncclProfilerKernelLaunchDescr_t;
typedef struct {
  uint64_t seqNumber;  // this communicator's count of earlier calls of the same collective
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;  // the group event (v4's parent)
} ncclProfilerCollDescr_v5_t;
typedef struct {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;  // the group event (v4's parent)
} ncclProfilerP2pDescr_v5_t;

// parentObj in v5 and v6: a coll's is its CollApi event, a p2p's its P2pApi event (null
// when those are not started); a CollApi's or P2pApi's is the GroupApi event.
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    ncclProfilerGroupApiDescr_t groupApi;
    ncclProfilerCollApiDescr_v5_t collApi;
    ncclProfilerP2pApiDescr_v5_t p2pApi;
    ncclProfilerKernelLaunchDescr_t kernelLaunch;
    ncclProfilerCollDescr_v5_t coll;
    ncclProfilerP2pDescr_v5_t p2p;
    ncclProfilerProxyOpDescr_t proxyOp;
    ncclProfilerProxyStepDescr_t proxyStep;
    ncclProfilerKernelChDescr_t kernelCh;
    ncclProfilerNetPluginDescr_t netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void* stream;
} ncclProfilerCeCollDescr_v6_t;
typedef struct {
  bool isComplete;
  int nRanks;
} ncclProfilerCeSyncDescr_t;
typedef struct {
  int numOps;
  size_t totalBytes;
  bool useIntraSync;
} ncclProfilerCeBatchDescr_t;

// v5's descriptor with the copy-engine events added at the end of the union.
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    ncclProfilerGroupApiDescr_t groupApi;
    ncclProfilerCollApiDescr_v5_t collApi;
    ncclProfilerP2pApiDescr_v5_t p2pApi;
    ncclProfilerKernelLaunchDescr_t kernelLaunch;
    ncclProfilerCollDescr_v5_t coll;
    ncclProfilerP2pDescr_v5_t p2p;
    ncclProfilerProxyOpDescr_t proxyOp;
    ncclProfilerProxyStepDescr_t proxyStep;
    ncclProfilerKernelChDescr_t kernelCh;
    ncclProfilerNetPluginDescr_t netPlugin;
    ncclProfilerCeCollDescr_v6_t ceColl;
    ncclProfilerCeSyncDescr_t ceCollSync;
    ncclProfilerCeBatchDescr_t ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

// --- v7 (NCCL 2.31-2.32): v6's members, some with fields appended ---

typedef struct {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
  uint64_t userTag;  // the call's ncclCollConfig_t userProfilerTag (0: none)
} ncclProfilerCollApiDescr_v7_t;
typedef struct {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
  uint64_t userTag;
} ncclProfilerP2pApiDescr_v7_t;
typedef struct {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
  const char* kernelVariant;  // a symmetric kernel's name; null otherwise
  bool isSymColl;
  uint64_t userTag;
} ncclProfilerCollDescr_v7_t;
typedef struct {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
  uint64_t userTag;
} ncclProfilerP2pDescr_v7_t;
typedef struct {
  uint64_t seqNumber;
  const char* func;
  void const* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void* stream;
  uint64_t userTag;
} ncclProfilerCeCollDescr_v7_t;
typedef struct {
  uint8_t channelId;
  uint8_t phaseId;  // 0: initial sync, 1: compute, 2: final sync
  const char* phaseName;
  uint64_t pTimer;
} ncclProfilerKernelPhaseDescr_t;

// parentObj as in v5 and v6.
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    ncclProfilerGroupApiDescr_t groupApi;
    ncclProfilerCollApiDescr_v7_t collApi;
    ncclProfilerP2pApiDescr_v7_t p2pApi;
    ncclProfilerKernelLaunchDescr_t kernelLaunch;
    ncclProfilerCollDescr_v7_t coll;
    ncclProfilerP2pDescr_v7_t p2p;
    ncclProfilerProxyOpDescr_t proxyOp;
    ncclProfilerProxyStepDescr_t proxyStep;
    ncclProfilerKernelChDescr_t kernelCh;
    ncclProfilerNetPluginDescr_t netPlugin;
    ncclProfilerCeCollDescr_v7_t ceColl;
    ncclProfilerCeSyncDescr_t ceCollSync;
    ncclProfilerCeBatchDescr_t ceCollBatch;
    ncclProfilerKernelPhaseDescr_t kernelPhase;
  };
} ncclProfilerEventDescr_v7_t;

// --- the tables of v5, v6 and v7: one shape ---

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v6_t eState,
                                   ncclProfilerEventStateArgs_v6_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v7_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v7_t eState,
                                   ncclProfilerEventStateArgs_v7_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v7_t;

}  // extern "C"
