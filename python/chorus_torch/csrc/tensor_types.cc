#include "tensor_types.h"

#include <ATen/MemoryOverlap.h>

namespace chorus_torch {

void checkTensor(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK(tensor.defined(), "chorus: ", what, ": undefined tensor");
  TORCH_CHECK(tensor.layout() == at::kStrided, "chorus: ", what, ": sparse tensors are not supported here (layout ",
              tensor.layout(), "; all_reduce takes sparse COO tensors with ReduceOp.SUM): pass tensor.to_dense()");
  TORCH_CHECK(tensor.device().is_cpu(), "chorus: ", what, ": tensors must be on the CPU (got ", tensor.device(),
              "); the chorus backend serves CPU tensors (for CUDA tensors use backend \"nccl\" with Chorus' ",
              "libnccl.so.2)");
}

Staged stage(const at::Tensor& tensor, Staged::Use use) {
  // Refused at the call, before anything runs: a result cannot be written back into a
  // tensor whose elements share memory (expand(), as_strided).
  TORCH_CHECK(use == Staged::Use::Read || at::has_internal_overlap(tensor) != at::MemOverlap::Yes,
              "chorus: a tensor the call writes has elements that share memory (sizes ", tensor.sizes(), ", strides ",
              tensor.strides(), ", as from expand()): pass a tensor with memory of its own (.clone())");
  if (tensor.is_contiguous()) return {tensor, tensor};
  if (use == Staged::Use::Write)
    return {tensor, at::empty(tensor.sizes(), tensor.options().memory_format(at::MemoryFormat::Contiguous))};
  return {tensor, tensor.contiguous()};
}

void Staged::copyBack() const {
  if (!buffer.is_same(user)) user.copy_(buffer);
}

const at::Tensor& singleTensor(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "chorus: ", what, ": expects exactly one tensor per process, got ", tensors.size());
  checkTensor(tensors[0], what);
  return tensors[0];
}

ncclDataType_t ncclTypeOf(at::ScalarType type, const char* what) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    case at::kBool:
      return ncclUint8;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    default:
      TORCH_CHECK(false, "chorus: ", what, ": cannot reduce tensors of dtype ", type);
  }
}

namespace {

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

double preMulFactor(const c10d::ReduceOp& op) {
  auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "chorus: PREMUL_SUM without its factor");
  if (!supplement->tensor_factor.defined()) return supplement->double_factor;
  return supplement->tensor_factor.item<double>();
}

}  // namespace

Reduction reductionOf(const at::Tensor& tensor, const c10d::ReduceOp& op, const char* what) {
  Reduction r;
  const c10d::ReduceOp::RedOpType kind = op.op_;
  const bool isBool = tensor.scalar_type() == at::kBool;
  if (kind == c10d::ReduceOp::BAND || kind == c10d::ReduceOp::BOR || kind == c10d::ReduceOp::BXOR) {
    TORCH_CHECK(isBool || at::isIntegralType(tensor.scalar_type(), /*includeBool=*/false), "chorus: ", what,
                ": ReduceOp.", opName(kind), " needs an integer or bool tensor, got ", tensor.scalar_type());
    r.kind = Reduction::Kind::Bitwise;
    r.bitwise = kind;
    return r;
  }
  if (tensor.is_complex()) {
    TORCH_CHECK(kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG || kind == c10d::ReduceOp::PREMUL_SUM,
                "chorus: ", what, ": ReduceOp.", opName(kind), " is not defined for complex tensors");
  }
  r.scalarType = reducible(tensor).scalar_type();
  r.computeType = r.scalarType == at::kShort ? at::kInt : r.scalarType;
  if (kind == c10d::ReduceOp::AVG && !isBool) {
    const bool halfWidth = r.scalarType == at::kHalf || r.scalarType == at::kBFloat16;
    r.computeType = at::isIntegralType(r.scalarType, false) ? at::kLong : halfWidth ? at::kFloat : r.scalarType;
  }
  r.type = ncclTypeOf(r.computeType, what);
  switch (kind) {
    case c10d::ReduceOp::SUM:
      r.op = isBool ? ncclMax : ncclSum;
      break;  // bool: logical or
    case c10d::ReduceOp::PRODUCT:
      r.op = isBool ? ncclMin : ncclProd;
      break;  // bool: logical and
    case c10d::ReduceOp::MIN:
      r.op = ncclMin;
      break;
    case c10d::ReduceOp::MAX:
      r.op = ncclMax;
      break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "chorus: ", what, ": ReduceOp.AVG is not defined for bool tensors");
      r.op = ncclSum;
      r.average = true;
      break;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(!isBool, "chorus: ", what, ": ReduceOp.PREMUL_SUM is not defined for bool tensors");
      r.kind = Reduction::Kind::PreMulSum;
      r.factor = preMulFactor(op);
      break;
    default:
      TORCH_CHECK(false, "chorus: ", what, ": unknown ReduceOp ", static_cast<int>(kind));
  }
  return r;
}

at::Tensor computeTensor(const at::Tensor& data, const Reduction& r) {
  return data.scalar_type() == r.computeType ? data : data.to(r.computeType);
}

void finishReduction(const Reduction& r, const at::Tensor& computed, const at::Tensor& data, int ranks) {
  if (r.average) {
    if (at::isIntegralType(computed.scalar_type(), false)) {
      computed.div_(ranks, "trunc");  // as NCCL's integer average rounds
    } else {
      computed.div_(ranks);
    }
  }
  if (!computed.is_same(data)) data.copy_(computed);
}

void combineBitwise(const at::Tensor& gathered, int ranks, c10d::ReduceOp::RedOpType op, const at::Tensor& out) {
  at::Tensor blocks = gathered.view({ranks, -1});
  at::Tensor acc = blocks[0].clone();
  for (int i = 1; i < ranks; ++i) {
    if (op == c10d::ReduceOp::BAND) {
      acc.bitwise_and_(blocks[i]);
    } else if (op == c10d::ReduceOp::BOR) {
      acc.bitwise_or_(blocks[i]);
    } else {
      acc.bitwise_xor_(blocks[i]);
    }
  }
  out.view(-1).copy_(acc);
}

}  // namespace chorus_torch
