/* ABI layout as NVIDIA's nccl.h declares it (compiled with -I/usr/local/cuda/include). */
#include <nccl.h>

#include "abi_layout.inc"
