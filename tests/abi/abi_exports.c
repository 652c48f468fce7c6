/* libnccl.so.2 must export every entry point NCCL 2.28.9 exports, under both its
 * nccl* name and its pnccl* profiling alias. NVIDIA's libnccl.so.2 exports these
 * 52 pairs plus ncclResetDebugInitInternal (53 nccl* symbols, 52 pnccl*); that
 * internal symbol is not required. Usage: abi_exports /path/to/libnccl.so.2 */
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
  const size_t count = sizeof(kNccl228EntryPoints) / sizeof(kNccl228EntryPoints[0]);
  int missing = 0;
  for (size_t i = 0; i < count; ++i) {
    char profiled[128];
    snprintf(profiled, sizeof(profiled), "p%s", kNccl228EntryPoints[i]);
    const char* names[2] = {kNccl228EntryPoints[i], profiled};
    for (int n = 0; n < 2; ++n) {
      if (dlsym(library, names[n]) == NULL) {
        fprintf(stderr, "missing export: %s\n", names[n]);
        ++missing;
      }
    }
  }
  printf("%zu entry points checked (nccl* and pnccl*), %d missing\n", count, missing);
  dlclose(library);
  return (missing == 0 && count == 52) ? 0 : 1;
}
