/* A program written against NVIDIA's nccl.h (compiled with -I/usr/local/cuda/include)
 * and linked against Chorus' libnccl.so.2: it must load Chorus, not NVIDIA's
 * library, and run communicators and AllReduce on host memory. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CHORUS_LIBRARY_DIR
#error "CHORUS_LIBRARY_DIR must name the directory holding Chorus' libnccl.so.2"
#endif

static int failures = 0;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      ++failures;                                          \
    }                                                      \
  } while (0)

#define CHECK_NCCL(call)                                                                                    \
  do {                                                                                                      \
    ncclResult_t result_ = (call);                                                                          \
    CHECK(result_ == ncclSuccess, "%s returned %d (%s)", #call, (int)result_, ncclGetErrorString(result_)); \
  } while (0)

static void checkLoadedLibraryIsChorus(void) {
  Dl_info info;
  memset(&info, 0, sizeof(info));
  CHECK(dladdr((void*)&ncclGetVersion, &info) != 0 && info.dli_fname != NULL, "dladdr(ncclGetVersion) failed");
  if (info.dli_fname == NULL) return;
  char loaded[PATH_MAX], expected[PATH_MAX];
  CHECK(realpath(info.dli_fname, loaded) != NULL, "realpath(%s) failed", info.dli_fname);
  CHECK(realpath(CHORUS_LIBRARY_DIR, expected) != NULL, "realpath(%s) failed", CHORUS_LIBRARY_DIR);
  CHECK(strncmp(loaded, expected, strlen(expected)) == 0,
        "ncclGetVersion comes from %s, not from Chorus' build directory %s", loaded, expected);
  printf("ncclGetVersion resolved from %s\n", loaded);
}

static void checkOneRankConfigAllReduce(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CHECK(config.size == sizeof(ncclConfig_t), "NCCL_CONFIG_INITIALIZER size %zu", config.size);
  ncclUniqueId id;
  CHECK(sizeof(id) == NCCL_UNIQUE_ID_BYTES, "sizeof(ncclUniqueId) %zu", sizeof(id));
  CHECK_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRankConfig(&comm, 1, id, 0, &config));
  if (comm == NULL) return;
  int count = 0, rank = -1;
  CHECK_NCCL(ncclCommCount(comm, &count));
  CHECK_NCCL(ncclCommUserRank(comm, &rank));
  CHECK(count == 1 && rank == 0, "count %d rank %d", count, rank);
  enum { kCount = 1000 };
  static float send[kCount], recv[kCount];
  for (int i = 0; i < kCount; ++i) send[i] = (float)(i % 17);
  CHECK_NCCL(ncclAllReduce(send, recv, kCount, ncclFloat, ncclSum, comm, (cudaStream_t)0));
  for (int i = 0; i < kCount; ++i) {
    if (recv[i] != send[i]) {
      CHECK(0, "1-rank AllReduce index %d: expected %g got %g", i, send[i], recv[i]);
      break;
    }
  }
  CHECK_NCCL(ncclCommDestroy(comm));
}

static void checkTwoRankInitAllAllReduce(void) {
  ncclComm_t comms[2] = {NULL, NULL};
  CHECK_NCCL(ncclCommInitAll(comms, 2, NULL));
  if (comms[0] == NULL || comms[1] == NULL) return;
  enum { kCount = 4099 };
  static double buffers[2][kCount];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < kCount; ++i) buffers[r][i] = (double)(r + 1) * (i % 13);
  CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) {
    CHECK_NCCL(ncclAllReduce(buffers[r], buffers[r], kCount, ncclDouble, ncclSum, comms[r], (cudaStream_t)0));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < kCount; ++i) {
      if (buffers[r][i] != 3.0 * (i % 13)) {
        CHECK(0, "2-rank AllReduce rank %d index %d: expected %g got %g", r, i, 3.0 * (i % 13), buffers[r][i]);
        break;
      }
    }
    CHECK_NCCL(ncclCommDestroy(comms[r]));
  }
}

int main(void) {
  checkLoadedLibraryIsChorus();
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  CHECK(version >= 22800 && version < 22900, "ncclGetVersion gave %d", version);
  CHECK(version == NCCL_VERSION_CODE, "ncclGetVersion %d vs header NCCL_VERSION_CODE %d", version, NCCL_VERSION_CODE);
  checkOneRankConfigAllReduce();
  checkTwoRankInitAllAllReduce();
  if (failures == 0) printf("abi_check: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
