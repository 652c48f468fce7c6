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

// What a reduction of `tensor` under `op` runs as. AVG is a SUM divided by the group's
// size afterwards, as gloo's: of the exact sum for integers (in int64, truncated toward
// zero, where NCCL's sum would wrap in int8), in float for half and bfloat16 (one rounding;
// NCCL's 1/n before the sum is a ulp off gloo's). int16, which NCCL has no type for, runs
// as int32: the same bits modulo 2^16 for SUM and PRODUCT, exact for MIN and MAX.
struct Reduction {
  enum class Kind { Nccl, PreMulSum, Bitwise };
  Kind kind = Kind::Nccl;
  at::ScalarType scalarType = at::kFloat;                    // of reducible(tensor)
  at::ScalarType computeType = at::kFloat;                   // what NCCL reduces: scalarType, or a copy in a wider type
  bool average = false;                                      // AVG: divide by the group's size after the sum
  ncclDataType_t type = ncclFloat32;                         // of computeType
  ncclRedOp_t op = ncclSum;                                  // Kind::Nccl
  double factor = 1.0;                                       // Kind::PreMulSum
  c10d::ReduceOp::RedOpType bitwise = c10d::ReduceOp::BAND;  // Kind::Bitwise
};
Reduction reductionOf(const at::Tensor& tensor, const c10d::ReduceOp& op, const char* what);

// The tensor NCCL reduces for `data` (a reducible() tensor): `data` itself, or a copy of
// it in r.computeType.
at::Tensor computeTensor(const at::Tensor& data, const Reduction& r);
// Once NCCL reduced `computed` over `ranks` ranks: the average where the op is AVG, then
// the result into `data` where `computed` is a copy.
void finishReduction(const Reduction& r, const at::Tensor& computed, const at::Tensor& data, int ranks);

// Combines the `ranks` blocks of `gathered` (rank-major, each shaped like `out`) with
// the bitwise op, into `out`; NCCL has no bitwise reductions, so they gather and combine.
void combineBitwise(const at::Tensor& gathered, int ranks, c10d::ReduceOp::RedOpType op, const at::Tensor& out);

// Where NCCL reads or writes the tensor.
inline void* dataOf(const at::Tensor& tensor) { return tensor.data_ptr(); }

// Bytes of a tensor, for the calls that only move data (any dtype travels as bytes).
inline size_t byteSize(const at::Tensor& tensor) { return tensor.numel() * tensor.element_size(); }

}  // namespace chorus_torch
