/* libnccl.so.2 must export every entry point NCCL 2.28.9 and 2.30.7 export, under both
 * its nccl* name and its pnccl* profiling alias. NVIDIA's 2.28.9 exports the first 52
 * pairs plus ncclResetDebugInitInternal (53 nccl* symbols, 52 pnccl*); that internal
 * symbol is not required. 2.30.7 (the NCCL of PyTorch 2.15's wheels) adds 30 pairs: a
 * program linked against it, PyTorch among them, does not load without them.
 * Usage: abi_exports /path/to/libnccl.so.2 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char* const kNccl228EntryPoints[] = {
    "ncclAllGather",
    "ncclAllReduce",
    "ncclAlltoAll",
    "ncclBcast",
    "ncclBroadcast",
    "ncclCommAbort",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommDeregister",
    "ncclCommDestroy",
    "ncclCommFinalize",
    "ncclCommGetAsyncError",
    "ncclCommInitAll",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommRegister",
    "ncclCommRevoke",
    "ncclCommShrink",
    "ncclCommSplit",
    "ncclCommUserRank",
    "ncclCommWindowDeregister",
    "ncclCommWindowRegister",
    "ncclDevCommCreate",
    "ncclDevCommDestroy",
    "ncclGather",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclGetUniqueId",
    "ncclGetVersion",
    "ncclGinBarrierCreateRequirement",
    "ncclGroupEnd",
    "ncclGroupSimulateEnd",
    "ncclGroupStart",
    "ncclLLA2ACalcSlots",
    "ncclLLA2ACreateRequirement",
    "ncclLsaBarrierCreateRequirement",
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclRecv",
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
    "ncclReduce",
    "ncclReduceScatter",
    "ncclResetDebugInit",
    "ncclScatter",
    "ncclSend",
    "ncclTeamLsa",
    "ncclTeamRail",
    "ncclTeamRankToLsa",
    "ncclTeamRankToWorld",
    "ncclTeamWorld",
};

static const char* const kNccl230Additions[] = {
    "ncclCommGetUniqueId",
    "ncclCommGrow",
    "ncclCommMemStats",
    "ncclCommQueryProperties",
    "ncclCommResume",
    "ncclCommSuspend",
    "ncclGetLsaDevicePointer",
    "ncclGetLsaMultimemDevicePointer",
    "ncclGetMultimemDevicePointer",
    "ncclGetPeerDevicePointer",
    "ncclGinInboxA2ACreateRequirement",
    "ncclGinOutboxCreateRequirement",
    "ncclParamBind",
    "ncclParamDumpAll",
    "ncclParamGet",
    "ncclParamGetAllParameterKeys",
    "ncclParamGetI16",
    "ncclParamGetI32",
    "ncclParamGetI64",
    "ncclParamGetI8",
    "ncclParamGetParameter",
    "ncclParamGetStr",
    "ncclParamGetU16",
    "ncclParamGetU32",
    "ncclParamGetU64",
    "ncclParamGetU8",
    "ncclPutSignal",
    "ncclSignal",
    "ncclWaitSignal",
    "ncclWinGetUserPtr",
};

static int checkExports(void* library, const char* const* names, size_t count) {
  int missing = 0;
  for (size_t i = 0; i < count; ++i) {
    char profiled[128];
    snprintf(profiled, sizeof(profiled), "p%s", names[i]);
    const char* pair[2] = {names[i], profiled};
    for (int n = 0; n < 2; ++n) {
      if (dlsym(library, pair[n]) == NULL) {
        fprintf(stderr, "missing export: %s\n", pair[n]);
        ++missing;
      }
    }
  }
  return missing;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libnccl.so.2\n", argv[0]);
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  const size_t count228 = sizeof(kNccl228EntryPoints) / sizeof(kNccl228EntryPoints[0]);
  const size_t count230 = sizeof(kNccl230Additions) / sizeof(kNccl230Additions[0]);
  const int missing =
      checkExports(library, kNccl228EntryPoints, count228) + checkExports(library, kNccl230Additions, count230);
  printf("%zu + %zu entry points checked (nccl* and pnccl*), %d missing\n", count228, count230, missing);
  dlclose(library);
  return (missing == 0 && count228 == 52 && count230 == 30) ? 0 : 1;
}
