/* Built against the installed nccl.h and libnccl.so: one rank, one AllReduce. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  ncclComm_t comm;
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  if (ncclCommInitAll(&comm, 1, NULL) != ncclSuccess) return 2;
  if (ncclAllReduce(in, out, 4, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) return 3;
  for (int i = 0; i < 4; ++i)
    if (out[i] != in[i]) return 4;
  ncclCommDestroy(comm);
  printf("consumer: NCCL_VERSION_CODE %d, AllReduce ok\n", version);
  return 0;
}
