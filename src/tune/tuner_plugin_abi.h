// The C tables an external tuner plugin (libnccl-tuner-<name>.so) exports, laid out as NCCL
// lays them out: plugins built against NCCL's headers are loaded unchanged, so the field
// order, the types and the numbering here are an ABI and must not be edited.
//
// Written from NVIDIA/nccl src/include/plugin/:
//   nccl_tuner.h        NCCL_ALGO_*, NCCL_PROTO_*, NCCL_ALGO_PROTO_IGNORE, the table's size
//   nccl_common.h       ncclFunc_t (the collective a call is)
//   tuner/tuner_v3.h    ncclTuner_v3_t: the cost table, getCollInfo without regBuff
//   tuner/tuner_v4.h    ncclTuner_v4_t: regBuff added
//   tuner/tuner_v5.h    ncclTuner_v5_t (NCCL 2.28's newest): init takes a communicator id,
//                       the NVLink domains and NCCL's tuning constants; destroy is finalize
//   tuner/tuner_v6.h    ncclTuner_v6_t (NCCL 2.30's newest): v5 and an optional getChunkSize
// NCCL looks the symbols up newest first and loads older ones too, so plugins export the
// tables of the NCCLs they serve (aws-ofi-nccl: v6, v3 and v2). ncclTunerPlugin_v2 (a
// different getCollInfo) and NVIDIA's not yet released v7 are not described here.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "core/plugin_log_abi.h"
#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

// Symbols a plugin exports, newest first.
#define NCCL_TUNER_PLUGIN_SYMBOL_V6 "ncclTunerPlugin_v6"
#define NCCL_TUNER_PLUGIN_SYMBOL_V5 "ncclTunerPlugin_v5"
#define NCCL_TUNER_PLUGIN_SYMBOL_V4 "ncclTunerPlugin_v4"
#define NCCL_TUNER_PLUGIN_SYMBOL_V3 "ncclTunerPlugin_v3"

// --- nccl_common.h ---
typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclNumFuncs = 8
} ncclFunc_t;

// --- nccl_tuner.h ---
// The cost table handed to getCollInfo is float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS],
// row-major, passed as float** (a plugin casts it back); microseconds, or
// NCCL_ALGO_PROTO_IGNORE where the pair is not available for the call.
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7

#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

#define NCCL_ALGO_PROTO_IGNORE -1.0

#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3

#define NCCL_NUM_COMPCAPS 4       // Volta, Ampere, Hopper, Blackwell
#define NCCL_NUM_TUNING_SCALES 3  // 1 node, 2 nodes, 4 nodes

// --- tuner_v5.h (also v6's) ---
typedef struct {
  int nNvlDomains;           // NVLink domains of the communicator
  int minRanksPerNvlDomain;  // fewest ranks in one of them
  int maxRanksPerNvlDomain;  // most ranks in one of them
} ncclNvlDomainInfo_v5_t;
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;

// NCCL's tuning constants, handed to init to read and change before NCCL builds its model.
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];                   // us per call
  double hwLatencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];  // us per hop
  double llMaxBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];                      // GB/s caps
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
} ncclTunerConstants_v5_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

// getCollInfo of v4 to v6 (the typedef is Chorus' name; NCCL spells it out). In: the collective, its size (NCCL's
// nBytes), the calls in its group (numPipeOps), the table's dimensions, whether the buffers are registered. In/out: the
// cost table; out: nChannels, the most channels the call may use (0: NCCL decides). Its context is what init returned.
typedef ncclResult_t (*ncclTunerGetCollInfo_v4_t)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                                  float** collCostTable, int numAlgo, int numProto, int regBuff,
                                                  int* nChannels);

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  ncclTunerGetCollInfo_v4_t getCollInfo;
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

// --- tuner_v6.h ---
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v6_t* nvlDomainInfo, ncclTunerConstants_v6_t* constants);
  ncclTunerGetCollInfo_v4_t getCollInfo;
  ncclResult_t (*finalize)(void* context);
  // Optional (may be NULL): changes the chunk size NCCL chose for the call's algorithm,
  // protocol and channels.
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algo, int proto, int nChannels,
                               size_t* chunkSize);
} ncclTuner_v6_t;

// --- tuner_v4.h ---
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclTunerGetCollInfo_v4_t getCollInfo;
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

// --- tuner_v3.h ---
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps, float** collCostTable,
                              int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

#ifdef __cplusplus
}
#endif
