// How torch tensors and reduce ops map onto Chorus' NCCL types, with PyTorch's NCCL
// backend as the reference: bool is uint8 (SUM is MAX, PRODUCT is MIN), complex numbers
// reduce as pairs of reals under SUM and AVG, and what NCCL cannot reduce is an error
// raised at the call, naming the op and dtype.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "nccl.h"

namespace chorus_torch {

// A tensor a call takes: a dense (strided) CPU tensor. Raises (c10::Error) naming `what`
// otherwise: sparse (but see allreduce_sparse) and CUDA tensors are refused with what to do instead.
void checkTensor(const at::Tensor& tensor, const char* what);

// A tensor as NCCL sees it: the user's tensor itself when it is contiguous, else a
// contiguous copy (Read, ReadWrite) or a contiguous buffer (Write) whose contents go back
// into the user's tensor once the call is done (copyBack, on the queue's thread).
struct Staged {
  enum class Use { Read, Write, ReadWrite };
  at::Tensor user;
  at::Tensor buffer;
  void copyBack() const;  // no-op when buffer is the user's tensor
};
Staged stage(const at::Tensor& tensor, Staged::Use use);
// The one tensor of a call that takes a list (one tensor per process, as ProcessGroupNCCL
// on one device).
const at::Tensor& singleTensor(const std::vector<at::Tensor>& tensors, const char* what);

// The NCCL type that carries `type` element by element, or raises.
ncclDataType_t ncclTypeOf(at::ScalarType type, const char* what);

// The tensor as a reduction sees it: complex numbers as pairs of reals.
inline at::Tensor reducible(const at::Tensor& tensor) {
  return tensor.is_complex() ? at::view_as_real(tensor) : tensor;
}

// What a reduction of `tensor` under `op` runs as.
struct Reduction {
  enum class Kind { Nccl, PreMulSum, Bitwise };
  Kind kind = Kind::Nccl;
  at::ScalarType scalarType = at::kFloat;  // of reducible(tensor)
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;                                  // Kind::Nccl
  double factor = 1.0;                                       // Kind::PreMulSum
  c10d::ReduceOp::RedOpType bitwise = c10d::ReduceOp::BAND;  // Kind::Bitwise
};
Reduction reductionOf(const at::Tensor& tensor, const c10d::ReduceOp& op, const char* what);

// Combines the `ranks` blocks of `gathered` (rank-major, each shaped like `out`) with
// the bitwise op, into `out`; NCCL has no bitwise reductions, so they gather and combine.
void combineBitwise(const at::Tensor& gathered, int ranks, c10d::ReduceOp::RedOpType op, const at::Tensor& out);

// Where NCCL reads or writes the tensor.
inline void* dataOf(const at::Tensor& tensor) { return tensor.data_ptr(); }

// Bytes of a tensor, for the calls that only move data (any dtype travels as bytes).
inline size_t byteSize(const at::Tensor& tensor) { return tensor.numel() * tensor.element_size(); }

}  // namespace chorus_torch
