#include "harness/config_forms.h"

#include <cmath>
#include <limits>

#include "harness/rank_launcher.h"

namespace chorus_test {
namespace {

constexpr double kUnchecked = std::numeric_limits<double>::quiet_NaN();  // NCCL leaves it undefined
constexpr int kPoison = -7;

double input(int rank, size_t j) { return (rank + 1) * 10000.0 + static_cast<double>(j); }

double sumOver(int nranks, size_t j) {
  double sum = 0;
  for (int r = 0; r < nranks; ++r) sum += input(r, j);
  return sum;
}

bool sendsBlockPerRank(ConfigForm f) {
  return f == ConfigForm::kReduceScatter || f == ConfigForm::kAlltoAll || f == ConfigForm::kScatter;
}
bool receivesBlockPerRank(ConfigForm f) {
  return f == ConfigForm::kAllGather || f == ConfigForm::kAlltoAll || f == ConfigForm::kGather;
}

// What element j of `rank`'s receive buffer must hold.
double expectedAt(const FormCall& c, int rank, int nranks, size_t j) {
  const size_t block = j / c.count, i = j % c.count;
  const bool isRoot = rank == c.root;
  switch (c.form) {
    case ConfigForm::kAllReduce:
      return sumOver(nranks, j);
    case ConfigForm::kReduce:
      return isRoot ? sumOver(nranks, j) : kUnchecked;
    case ConfigForm::kBroadcast:
      return input(c.root, j);
    case ConfigForm::kAllGather:
      return input(static_cast<int>(block), i);
    case ConfigForm::kReduceScatter:
      return sumOver(nranks, rank * c.count + j);
    case ConfigForm::kAlltoAll:
      return input(static_cast<int>(block), rank * c.count + i);
    case ConfigForm::kGather:
      return isRoot ? input(static_cast<int>(block), i) : kUnchecked;
    case ConfigForm::kScatter:
      return input(c.root, rank * c.count + j);
  }
  return kUnchecked;
}

}  // namespace

const char* configFormName(ConfigForm form) {
  static const char* const kNames[] = {"AllReduce",     "Broadcast", "Reduce", "AllGather",
                                       "ReduceScatter", "AlltoAll",  "Gather", "Scatter"};
  return kNames[static_cast<int>(form)];
}

std::string FormCall::describe() const {
  return std::string("nccl") + configFormName(form) +
         (plain    ? ""
          : config ? "Config"
                   : "Config(NULL)") +
         (type == ncclFloat32 ? " float32" : " int32") + " count " + std::to_string(count) + " root " +
         std::to_string(root);
}

void FormBuffers::prepare(const FormCall& c, int rank, int nranks) {
  const size_t sendCount = sendsBlockPerRank(c.form) ? c.count * nranks : c.count;
  const size_t recvCount = receivesBlockPerRank(c.form) ? c.count * nranks : c.count;
  sendF_.assign(sendCount, 0);
  sendI_.assign(sendCount, 0);
  for (size_t j = 0; j < sendCount; ++j) {
    sendF_[j] = static_cast<float>(input(rank, j));
    sendI_[j] = static_cast<int32_t>(input(rank, j));
  }
  recvF_.assign(recvCount, static_cast<float>(kPoison));
  recvI_.assign(recvCount, kPoison);
}

ncclResult_t FormBuffers::issue(const FormCall& c, ncclComm_t comm) {
  const bool f = c.type == ncclFloat32;
  const void* s = f ? static_cast<const void*>(sendF_.data()) : static_cast<const void*>(sendI_.data());
  void* r = f ? static_cast<void*>(recvF_.data()) : static_cast<void*>(recvI_.data());
  const size_t n = c.count;
  const ncclDataType_t t = c.type;
  const ncclCollConfig_t* k = c.config;
  switch (c.form) {
    case ConfigForm::kAllReduce:
      return c.plain ? ncclAllReduce(s, r, n, t, ncclSum, comm, nullptr)
                     : ncclAllReduceConfig(s, r, n, t, ncclSum, comm, nullptr, k);
    case ConfigForm::kBroadcast:
      return c.plain ? ncclBroadcast(s, r, n, t, c.root, comm, nullptr)
                     : ncclBroadcastConfig(s, r, n, t, c.root, comm, nullptr, k);
    case ConfigForm::kReduce:
      return c.plain ? ncclReduce(s, r, n, t, ncclSum, c.root, comm, nullptr)
                     : ncclReduceConfig(s, r, n, t, ncclSum, c.root, comm, nullptr, k);
    case ConfigForm::kAllGather:
      return c.plain ? ncclAllGather(s, r, n, t, comm, nullptr) : ncclAllGatherConfig(s, r, n, t, comm, nullptr, k);
    case ConfigForm::kReduceScatter:
      return c.plain ? ncclReduceScatter(s, r, n, t, ncclSum, comm, nullptr)
                     : ncclReduceScatterConfig(s, r, n, t, ncclSum, comm, nullptr, k);
    case ConfigForm::kAlltoAll:
      return c.plain ? ncclAlltoAll(s, r, n, t, comm, nullptr) : ncclAlltoAllConfig(s, r, n, t, comm, nullptr, k);
    case ConfigForm::kGather:
      return c.plain ? ncclGather(s, r, n, t, c.root, comm, nullptr)
                     : ncclGatherConfig(s, r, n, t, c.root, comm, nullptr, k);
    case ConfigForm::kScatter:
      return c.plain ? ncclScatter(s, r, n, t, c.root, comm, nullptr)
                     : ncclScatterConfig(s, r, n, t, c.root, comm, nullptr, k);
  }
  return ncclInternalError;
}

std::string FormBuffers::check(const FormCall& c, int rank, int nranks) const {
  const size_t count = c.type == ncclFloat32 ? recvF_.size() : recvI_.size();
  for (size_t j = 0; j < count; ++j) {
    const double want = expectedAt(c, rank, nranks, j);
    if (std::isnan(want)) continue;
    const double got = c.type == ncclFloat32 ? static_cast<double>(recvF_[j]) : static_cast<double>(recvI_[j]);
    if (got != want) {
      return c.describe() + ": rank " + std::to_string(rank) + " element " + std::to_string(j) + " is " +
             std::to_string(got) + ", expected " + std::to_string(want);
    }
  }
  return "";
}

bool FormBuffers::receiveUntouched() const {
  for (float v : recvF_)
    if (v != static_cast<float>(kPoison)) return false;
  for (int32_t v : recvI_)
    if (v != kPoison) return false;
  return true;
}

std::string runForm(const FormCall& call, ncclComm_t comm, int rank, int nranks) {
  FormBuffers buffers;
  buffers.prepare(call, rank, nranks);
  const ncclResult_t r = buffers.issue(call, comm);
  if (r != ncclSuccess) return call.describe() + " returned " + resultName(r);
  return buffers.check(call, rank, nranks);
}

}  // namespace chorus_test
