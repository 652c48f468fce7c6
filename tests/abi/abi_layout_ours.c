/* ABI layout as Chorus' include/nccl.h declares it. */
#include <nccl.h>

#include "abi_layout.inc"
