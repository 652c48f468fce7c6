// The collective kernels on a GPU: ranks sharing one device (device_ranks.h) run every
// collective × algorithm × protocol on device buffers, with the Sum kernels and the
// run-time-op kernels, and a waiting kernel must end on abort and on timeout.
// Without a GPU every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device_ranks.h"
#include "work_item_fixture.h"

namespace chorus {
namespace gpu_test {
namespace {

using fixtures::rankInput;
using fixtures::wholeCallItem;

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    const std::string why = gpuUnavailableReason();                 \
    if (!why.empty()) GTEST_SKIP() << "GPU tests skipped: " << why; \
  } while (0)

FifoLayout smallSlots() {
  FifoLayout layout;
  layout.nSlots = kNcclSteps;
  layout.slotBytes[static_cast<int>(Protocol::LL)] = 16 * 256;     // 2 KiB of payload
  layout.slotBytes[static_cast<int>(Protocol::LL128)] = 128 * 64;  // 7.5 KiB of payload
  layout.slotBytes[static_cast<int>(Protocol::Simple)] = 64 * 1024;
  return layout;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> out(n);
  cudaMemcpy(out.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return out;
}

template <typename T>
DeviceBuffer uploadVector(const std::vector<T>& v) {
  return upload(v.data(), v.size());
}

const Protocol kProtocols[] = {Protocol::Simple, Protocol::LL, Protocol::LL128};

// Every rank's float AllReduce of rankInput(r, i): device buffers and one item per rank.
struct FloatAllReduce {
  std::vector<DeviceBuffer> send, recv;
  std::vector<WorkItem> items;
  FloatAllReduce(int nranks, size_t count, Algorithm algo, Protocol proto, RedKind kind) {
    for (int r = 0; r < nranks; ++r) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rankInput(r, i));
      send.push_back(uploadVector(in));
      recv.emplace_back(count * sizeof(float));
      items.push_back(
          wholeCallItem(WorkKind::AllReduce, algo, proto, ncclFloat32, send[r].get(), recv[r].get(), count, 0, kind));
    }
  }
};

TEST(GpuCollectives, AllReduceFloatSumEveryAlgorithmAndProtocol) {
  SKIP_WITHOUT_GPU();
  for (int nranks : {2, 3}) {
    for (Protocol proto : kProtocols) {
      for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree}) {
        for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
          DeviceRanks ranks(nranks, smallSlots());
          FloatAllReduce call(nranks, count, algo, proto, RedKind::Sum);
          ASSERT_TRUE(ranks.run(call.items, RedKind::Sum)) << "kernels did not finish";
          for (int r = 0; r < nranks; ++r) {
            ASSERT_EQ(ranks.status(r).code, 0) << ranks.status(r).what;
            const std::vector<float> out = download<float>(call.recv[r], count);
            for (size_t i = 0; i < count; ++i) {
              float expected = 0;
              for (int q = 0; q < nranks; ++q) expected += static_cast<float>(rankInput(q, i));
              ASSERT_EQ(out[i], expected)
                  << nranks << " ranks proto " << static_cast<int>(proto) << " algo " << static_cast<int>(algo)
                  << " count " << count << " rank " << r << " index " << i;
            }
          }
        }
      }
    }
  }
}

// The run-time-op kernels: int32 Max and Min, and an average (PreMulSum by 1/2) of floats.
TEST(GpuCollectives, RunTimeOpsMaxMinAndPreMulSum) {
  SKIP_WITHOUT_GPU();
  const int nranks = 2;
  const size_t count = 70001;
  for (Protocol proto : kProtocols) {
    for (RedKind kind : {RedKind::Max, RedKind::Min}) {
      DeviceRanks ranks(nranks, smallSlots());
      std::vector<DeviceBuffer> send, recv;
      std::vector<WorkItem> items;
      for (int r = 0; r < nranks; ++r) {
        std::vector<int32_t> in(count);
        for (size_t i = 0; i < count; ++i) in[i] = rankInput(r, i) * (i % 2 ? 1 : -1);
        send.push_back(uploadVector(in));
        recv.emplace_back(count * sizeof(int32_t));
        items.push_back(wholeCallItem(WorkKind::AllReduce, Algorithm::Ring, proto, ncclInt32, send[r].get(),
                                      recv[r].get(), count, 0, kind));
      }
      ASSERT_TRUE(ranks.run(items, kind));
      for (int r = 0; r < nranks; ++r) {
        const std::vector<int32_t> out = download<int32_t>(recv[r], count);
        for (size_t i = 0; i < count; ++i) {
          const int32_t a = rankInput(0, i) * (i % 2 ? 1 : -1), b = rankInput(1, i) * (i % 2 ? 1 : -1);
          ASSERT_EQ(out[i], kind == RedKind::Max ? std::max(a, b) : std::min(a, b)) << "rank " << r << " " << i;
        }
      }
    }
    DeviceRanks ranks(nranks, smallSlots());
    FloatAllReduce call(nranks, count, Algorithm::Ring, proto, RedKind::PreMulSum);
    const float half = 0.5f;
    for (WorkItem& w : call.items) memcpy(&w.op.scalarBits, &half, sizeof(half));
    ASSERT_TRUE(ranks.run(call.items, RedKind::PreMulSum));
    for (int r = 0; r < nranks; ++r) {
      const std::vector<float> out = download<float>(call.recv[r], count);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[i], 0.5f * static_cast<float>(rankInput(0, i) + rankInput(1, i))) << "rank " << r << " " << i;
    }
  }
}

// ReduceScatter, AllGather, Broadcast (root 1) and Reduce (root 2) of int32 over 3 ranks.
TEST(GpuCollectives, ReduceScatterAllGatherBroadcastReduce) {
  SKIP_WITHOUT_GPU();
  const int nranks = 3;
  for (Protocol proto : kProtocols) {
    for (size_t count : {size_t{5}, size_t{300007}}) {
      std::vector<std::vector<int32_t>> wide(nranks), narrow(nranks);
      for (int r = 0; r < nranks; ++r) {
        for (size_t i = 0; i < nranks * count; ++i) wide[r].push_back(rankInput(r, i * 3 + 1));
        for (size_t i = 0; i < count; ++i) narrow[r].push_back(rankInput(r, i));
      }
      auto runAll = [&](WorkKind kind, int root, bool wideIn, bool wideOut) {
        DeviceRanks ranks(nranks, smallSlots());
        std::vector<DeviceBuffer> in, out;
        std::vector<WorkItem> items;
        for (int r = 0; r < nranks; ++r) {
          in.push_back(uploadVector(wideIn ? wide[r] : narrow[r]));
          out.emplace_back((wideOut ? nranks : 1) * count * sizeof(int32_t));
          items.push_back(wholeCallItem(kind, Algorithm::Ring, proto, ncclInt32, in[r].get(), out[r].get(), count, root,
                                        RedKind::Sum));
        }
        EXPECT_TRUE(ranks.run(items, RedKind::Sum));
        std::vector<std::vector<int32_t>> result;
        for (int r = 0; r < nranks; ++r) result.push_back(download<int32_t>(out[r], (wideOut ? nranks : 1) * count));
        return result;
      };
      auto rs = runAll(WorkKind::ReduceScatter, 0, true, false);
      for (int r = 0; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(rs[r][i], wide[0][r * count + i] + wide[1][r * count + i] + wide[2][r * count + i]);
      auto ag = runAll(WorkKind::AllGather, 0, false, true);
      for (int r = 0; r < nranks; ++r)
        for (int q = 0; q < nranks; ++q)
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(ag[r][q * count + i], narrow[q][i]);
      auto bc = runAll(WorkKind::Broadcast, 1, false, false);
      for (int r = 0; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(bc[r][i], narrow[1][i]);
      auto rd = runAll(WorkKind::Reduce, 2, false, false);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(rd[2][i], narrow[0][i] + narrow[1][i] + narrow[2][i]);
    }
  }
}

// A kernel waiting for data that never comes ends on abort, with the cause recorded.
TEST(GpuCollectives, AbortEndsAWaitingKernel) {
  SKIP_WITHOUT_GPU();
  for (Protocol proto : kProtocols) {
    DeviceRanks ranks(2, smallSlots());
    DeviceBuffer recv(4096);
    const WorkItem item = wholeCallItem(WorkKind::Recv, Algorithm::Ring, proto, ncclInt32, nullptr, recv.get(), 1024,
                                        /*peer*/ 1, RedKind::Sum);
    double seconds = 0;
    ASSERT_TRUE(ranks.runAlone(0, item, RedKind::Sum, 0.2, 0, &seconds)) << "the abort did not end the kernel";
    EXPECT_LT(seconds, 5.0);
    EXPECT_EQ(ranks.status(0).code, ncclSystemError);
    EXPECT_NE(std::string(ranks.status(0).what).find("aborted"), std::string::npos) << ranks.status(0).what;
    EXPECT_EQ(ranks.status(0).peer, 1);
  }
}

// ... and on its own timeout, without any abort.
TEST(GpuCollectives, TimeoutEndsAWaitingKernel) {
  SKIP_WITHOUT_GPU();
  DeviceRanks ranks(2, smallSlots());
  DeviceBuffer recv(4096);
  const WorkItem item = wholeCallItem(WorkKind::Recv, Algorithm::Ring, Protocol::Simple, ncclInt32, nullptr, recv.get(),
                                      1024, 1, RedKind::Sum);
  double seconds = 0;
  ASSERT_TRUE(ranks.runAlone(0, item, RedKind::Sum, -1, 300'000'000, &seconds));
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(ranks.status(0).code, ncclSystemError);
  EXPECT_NE(std::string(ranks.status(0).what).find("CHORUS_TIMEOUT"), std::string::npos) << ranks.status(0).what;
}

// A launch the executor cannot serve is refused before it reaches the GPU (so this one
// runs without a GPU too).
TEST(GpuCollectives, LaunchRefusesBadArguments) {
  KernelArgs args;
  EXPECT_EQ(launchCollectiveKernel(static_cast<ncclDataType_t>(99), RedKind::Sum, args, 1, 512, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(launchCollectiveKernel(ncclFloat32, RedKind::SumPostDiv, args, 1, 512, nullptr), ncclInvalidArgument);
  EXPECT_EQ(launchCollectiveKernel(ncclFloat32, RedKind::Sum, args, 0, 512, nullptr), ncclInvalidArgument);
  EXPECT_EQ(launchCollectiveKernel(ncclFloat32, RedKind::Sum, args, 1, 100, nullptr), ncclInvalidArgument);
}

}  // namespace
}  // namespace gpu_test
}  // namespace chorus
