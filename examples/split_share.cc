// Communicators split with and without config.splitShare, from one thread (every rank of
// ncclCommInitAll): each split's children run an AllReduce whose sum is checked, and the
// program prints what the splits cost: milliseconds per split and the resident memory the
// children added once each had moved data. With splitShare the children run over their
// parents' connections, so they add none.
//
//   split_share [ranks] [splits] [MiB per rank]      (defaults 4, 4, 32)
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

long residentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

bool check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, ncclGetErrorString(r));
  return false;
}

// An AllReduce on every rank of `comms` (rank r gives r + 1); true when every sum is right.
bool allReduceChecks(const std::vector<ncclComm_t>& comms, std::vector<std::vector<float>>& data) {
  const int n = static_cast<int>(comms.size());
  for (int r = 0; r < n; ++r) data[r].assign(data[r].size(), static_cast<float>(r + 1));
  ncclGroupStart();
  for (int r = 0; r < n; ++r)
    ncclAllReduce(data[r].data(), data[r].data(), data[r].size(), ncclFloat, ncclSum, comms[r], nullptr);
  if (!check(ncclGroupEnd(), "AllReduce")) return false;
  const float want = n * (n + 1) / 2.0f;
  for (int r = 0; r < n; ++r) {
    if (data[r].front() != want || data[r].back() != want) {
      std::fprintf(stderr, "rank %d: sum %g, expected %g\n", r, data[r].front(), want);
      return false;
    }
  }
  return true;
}

// `splits` splits of every parent (color 0: all ranks), each followed by a checked
// AllReduce on its children; prints their cost. The children are destroyed at the end.
bool splitAndMeasure(const std::vector<ncclComm_t>& parents, int splits, int share,
                     std::vector<std::vector<float>>& data) {
  const int n = static_cast<int>(parents.size());
  std::vector<std::vector<ncclComm_t>> children(splits, std::vector<ncclComm_t>(n, nullptr));
  const long before = residentKiB();
  double splitMs = 0;
  bool ok = true;
  for (int s = 0; s < splits && ok; ++s) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.splitShare = share;
    const auto start = std::chrono::steady_clock::now();
    ncclGroupStart();
    for (int r = 0; r < n; ++r) ncclCommSplit(parents[r], 0, r, &children[s][r], &config);
    ok = check(ncclGroupEnd(), "ncclCommSplit");
    splitMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ok = ok && allReduceChecks(children[s], data);
  }
  if (ok)
    std::printf("splitShare=%d: %d splits of %d ranks: %.1f ms per split, resident memory +%ld MiB\n", share, splits, n,
                splitMs / splits, (residentKiB() - before) / 1024);
  for (auto& split : children)
    for (ncclComm_t c : split)
      if (c != nullptr) ncclCommDestroy(c);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  const int splits = argc > 2 ? std::atoi(argv[2]) : 4;
  const size_t mib = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 32;
  if (n < 2 || splits < 1 || mib < 1) {
    std::fprintf(stderr, "usage: split_share [ranks >= 2] [splits >= 1] [MiB per rank >= 1]\n");
    return 2;
  }
  std::vector<ncclComm_t> parents(n);
  if (!check(ncclCommInitAll(parents.data(), n, nullptr), "ncclCommInitAll")) return 1;
  std::vector<std::vector<float>> data(n, std::vector<float>(mib << 18));
  bool ok = allReduceChecks(parents, data);  // the parents' buffers are in use before the splits
  ok = ok && splitAndMeasure(parents, splits, 0, data) && splitAndMeasure(parents, splits, 1, data);
  for (ncclComm_t c : parents) ncclCommDestroy(c);
  return ok ? 0 : 1;
}
