// all_reduce of a sparse (COO) tensor, ReduceOp.SUM, as gloo does it: NCCL moves dense
// buffers, so the ranks exchange what their tensors hold and each adds them up itself.
// Two jobs of the group's queue, queued together, one work:
//   1. every rank's dtype, shape and nonzero count (a fixed-size row each, all-gathered);
//   2. every rank's indices and values, padded to the largest count (two all-gathers in
//      one NCCL group), then, on the queue's thread, the sum of the n sparse tensors,
//      coalesced, copied into the caller's tensor.
// The second job's sizes come from the first's result, which its issue reads when it runs
// (the queue runs jobs in order). Every rank sees the same rows, so where the shapes differ
// every rank skips the second exchange alike and the work fails on each with both shapes.
#include <memory>
#include <sstream>

#include "backend_chorus.h"
#include "tensor_types.h"

namespace chorus_torch {

namespace {

constexpr int64_t kMaxDims = 64;             // PyTorch's own limit on a tensor's dimensions
constexpr int64_t kRowWords = 4 + kMaxDims;  // nnz, dtype, sparse dims, dims, then the sizes

// What the two jobs of one call share (the first writes, the second reads, on one thread).
struct SparseExchange {
  at::Tensor user;        // the caller's tensor: the result goes back into it
  at::Tensor input;       // coalesced
  at::Tensor ownRow;      // [kRowWords] int64
  at::Tensor rows;        // [ranks, kRowWords] int64
  at::Tensor indices;     // [ranks, sparse dims, largest nnz] int64
  at::Tensor values;      // [ranks, largest nnz, dense sizes...]
  at::Tensor ownIndices;  // this rank's blocks of the two, as sent
  at::Tensor ownValues;
  std::string failure;   // the first job's error, if it failed
  std::string mismatch;  // set when the ranks' dtypes or shapes differ
};

std::string shapeOf(const at::Tensor& rows, int64_t rank) {
  const at::Tensor row = rows[rank];
  std::ostringstream out;
  out << static_cast<at::ScalarType>(row[1].item<int64_t>()) << " sizes [";
  for (int64_t d = 0; d < row[3].item<int64_t>(); ++d) out << (d ? ", " : "") << row[4 + d].item<int64_t>();
  out << "] with " << row[2].item<int64_t>() << " sparse dims";
  return out.str();
}

// The first row that differs from this rank's in dtype or shape (nnz may differ), or "".
std::string shapeMismatch(const at::Tensor& rows, int rank) {
  const at::Tensor shapes = rows.narrow(1, 1, kRowWords - 1);
  for (int64_t r = 0; r < rows.size(0); ++r) {
    if (!at::equal(shapes[r], shapes[rank])) {
      return "chorus: all_reduce of a sparse tensor: rank " + std::to_string(rank) + "'s tensor has " +
             shapeOf(rows, rank) + ", rank " + std::to_string(r) + "'s " + shapeOf(rows, r);
    }
  }
  return "";
}

// The second job's NCCL calls: this rank's indices and values into its padded block of
// each, both all-gathered in one group. Nothing where the shapes differ or nothing is held.
ncclResult_t exchangeEntries(SparseExchange& x, int rank, ncclComm_t comm) {
  if (!x.failure.empty() || !x.mismatch.empty()) return ncclSuccess;
  const int64_t ranks = x.rows.size(0);
  const int64_t largest = x.rows.select(1, 0).max().item<int64_t>();
  if (largest == 0) return ncclSuccess;
  const int64_t sparseDims = x.input.sparse_dim();
  const int64_t nnz = x.input._nnz();
  std::vector<int64_t> valueShape{ranks, largest};
  for (int64_t d = sparseDims; d < x.input.dim(); ++d) valueShape.push_back(x.input.size(d));
  x.indices = at::zeros({ranks, sparseDims, largest}, at::kLong);
  x.values = at::zeros(valueShape, x.input.values().options());
  x.indices[rank].narrow(1, 0, nnz).copy_(x.input._indices());
  x.values[rank].narrow(0, 0, nnz).copy_(x.input._values());
  // Sent from copies that live as long as the exchange: the calls may still run after the issue returns.
  x.ownIndices = x.indices[rank].clone();
  x.ownValues = x.values[rank].clone();
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  result = ncclAllGather(dataOf(x.ownIndices), dataOf(x.indices), byteSize(x.ownIndices), ncclUint8, comm, nullptr);
  if (result == ncclSuccess)
    result = ncclAllGather(dataOf(x.ownValues), dataOf(x.values), byteSize(x.ownValues), ncclUint8, comm, nullptr);
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess ? result : end;
}

// The n ranks' tensors added up, coalesced: the call's result.
at::Tensor sumOfEntries(const SparseExchange& x) {
  at::Tensor sum = at::zeros_like(x.input);
  if (!x.indices.defined()) return sum.coalesce();  // no rank held anything
  for (int64_t r = 0; r < x.rows.size(0); ++r) {
    const int64_t nnz = x.rows[r][0].item<int64_t>();
    sum = sum + at::sparse_coo_tensor(x.indices[r].narrow(1, 0, nnz), x.values[r].narrow(0, 0, nnz), x.input.sizes(),
                                      x.input.options());
  }
  return sum.coalesce();
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce_sparse";
  TORCH_CHECK(tensors.size() == 1, "chorus: ", op, ": expects exactly one tensor per process, got ", tensors.size());
  const at::Tensor& tensor = tensors[0];
  TORCH_CHECK(tensor.defined() && tensor.layout() == at::kSparse, "chorus: ", op,
              ": expects a sparse COO tensor (layout ", tensor.defined() ? tensor.layout() : at::kStrided,
              "); other sparse layouts are not supported: pass tensor.to_sparse() or tensor.to_dense()");
  TORCH_CHECK(tensor.device().is_cpu(), "chorus: ", op, ": tensors must be on the CPU (got ", tensor.device(), ")");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "chorus: ", op,
              ": unsupported reduction operation (all_reduce of sparse tensors only works with ReduceOp.SUM, as "
              "gloo's)");
  TORCH_CHECK(tensor.dim() <= kMaxDims, "chorus: ", op, ": ", tensor.dim(), " dimensions, at most ", kMaxDims);
  checkOpen(op);
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    TORCH_CHECK(!coalescing_, "chorus: ", op, ": a sparse all_reduce cannot join a coalesced block");
  }

  auto x = std::make_shared<SparseExchange>();
  {
    at::NoGradGuard noGrad;
    x->user = tensor;
    // A copy: a coalesced tensor's coalesce() is the tensor itself, which the caller may
    // change before the queue's thread reads it.
    x->input = tensor.is_coalesced() ? tensor.clone() : tensor.coalesce();
    x->ownRow = at::zeros({kRowWords}, at::kLong);
    x->ownRow[0] = x->input._nnz();
    x->ownRow[1] = static_cast<int64_t>(x->input.scalar_type());
    x->ownRow[2] = x->input.sparse_dim();
    x->ownRow[3] = x->input.dim();
    for (int64_t d = 0; d < x->input.dim(); ++d) x->ownRow[4 + d] = x->input.size(d);
    x->rows = at::empty({size_, kRowWords}, at::kLong);
  }
  const uint64_t sequence = ++sequence_;
  const c10d::OpType type = c10d::OpType::_ALLREDUCE_SPARSE;
  auto work = c10::make_intrusive<ChorusWork>(rank_, type, sequence, std::vector<at::Tensor>{tensor}, 1,
                                              profilingTitle(name_, type), std::vector<at::Tensor>{tensor});
  auto issueShapes = [x](ncclComm_t comm) {
    return ncclAllGather(dataOf(x->ownRow), dataOf(x->rows), byteSize(x->ownRow), ncclUint8, comm, nullptr);
  };
  auto finishShapes = [x, rank = rank_](ncclResult_t result, const std::string& why) {
    if (result != ncclSuccess) {
      x->failure = why;
      return;
    }
    x->mismatch = shapeMismatch(x->rows, rank);
  };
  auto issueEntries = [x, rank = rank_](ncclComm_t comm) { return exchangeEntries(*x, rank, comm); };
  auto finishEntries = [x, work](ncclResult_t result, const std::string& why) {
    if (!x->failure.empty()) return work->complete(ncclSystemError, x->failure);
    if (!x->mismatch.empty()) return work->complete(ncclInvalidUsage, x->mismatch);
    if (result != ncclSuccess) return work->complete(result, why);
    try {
      at::NoGradGuard noGrad;
      x->user.copy_(sumOfEntries(*x));
    } catch (const std::exception& e) {
      return work->complete(ncclInternalError, std::string("after the collective: ") + e.what());
    }
    work->complete(ncclSuccess, "");
  };
  // Together: another thread's collective between the two would meet, on a peer, the
  // other job of this call.
  std::vector<CollectiveQueue::Step> steps;
  steps.push_back({"allreduce_sparse (shapes)", issueShapes, finishShapes});
  steps.push_back({"allreduce_sparse (indices and values)", issueEntries, finishEntries});
  queue_->pushTogether(std::move(steps), opts.timeout);
  return work;
}

}  // namespace chorus_torch
