/*
 * Chorus' own additions to NCCL's API (nccl.h is NCCL's, unchanged). A program that uses
 * them runs on Chorus only; everything else in it stays portable.
 */
#ifndef CHORUS_H_
#define CHORUS_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What runs a communicator's calls. A communicator is a GPU communicator (device buffers,
 * kernels on the caller's stream) when its rank has a usable CUDA device at init, as in
 * NCCL, and a CPU communicator (host buffers, the calls run on the calling thread)
 * otherwise. CHORUS_EXECUTOR=auto|cpu|gpu sets the default for the process. */
typedef enum {
  chorusExecutorAuto = 0, /* GPU where the CUDA executor can run, else CPU (CHORUS_EXECUTOR decides first) */
  chorusExecutorCpu = 1,  /* a CPU communicator, even on a machine with GPUs */
  chorusExecutorGpu = 2   /* a GPU communicator; ncclInvalidUsage where none can be used */
} chorusExecutor_t;

/* ncclCommInitRankConfig with the executor named: how one process has CPU communicators
 * (host tensors) next to GPU ones. Communicators split, shrunk or grown from it have the
 * same executor. */
ncclResult_t chorusCommInitRankExecutor(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                        ncclConfig_t* config, chorusExecutor_t executor);

/* Which executor runs `comm`'s calls: chorusExecutorCpu or chorusExecutorGpu. */
ncclResult_t chorusCommGetExecutor(ncclComm_t comm, chorusExecutor_t* executor);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H_ */
