// team_ops.h's element loops run by teams of host threads (team_exec.h), as a GPU block
// runs them: every element of every size, aligned (whole 16-byte packs, several in flight
// per thread, then a partial pack) and misaligned, written once with the right value, and
// nothing outside the range touched.
#include "device/common/team_ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "device/common/reduce_ops.h"
#include "team_exec.h"

namespace chorus {
namespace {

using fixtures::TeamExec;
using fixtures::TeamState;

constexpr int kGuard = 64;  // elements either side that must stay untouched
constexpr int kPoison = 99;

template <typename Body>
void onTeam(int nthreads, Body&& body) {
  ExecContext ctx;
  TeamState team(nthreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      TeamExec exec(ctx, team, t, nthreads);
      body(exec);
    });
  }
  for (std::thread& th : threads) th.join();
}

template <typename T>
class TeamOpsTest : public ::testing::Test {};
using Types = ::testing::Types<int8_t, int32_t, float, double>;
TYPED_TEST_SUITE(TeamOpsTest, Types);

// Sizes around every boundary of 3 and 4 threads' batches of packs.
std::vector<size_t> sizesFor(size_t packElems) {
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 40 * packElems; n += (n < 4 * packElems ? 1 : packElems - 1)) sizes.push_back(n);
  return sizes;
}

TYPED_TEST(TeamOpsTest, CopyAndReduceWriteEveryElementOnceAndNothingElse) {
  using T = TypeParam;
  const RedOp<T, RedKind::Sum> op{T(1), 1};
  const size_t pack = detail::Pack16<T>::kElems;
  for (int nthreads : {3, 4}) {
    for (size_t offset : {size_t{0}, size_t{1}}) {  // 1: misaligned, element by element
      for (size_t n : sizesFor(pack)) {
        const size_t total = n + 2 * kGuard + offset;
        // 16-byte aligned storage, so offset 0 takes the packed path.
        auto storage = [&] { return std::vector<detail::Pack16<T>>(total / pack + 2); };
        auto sa = storage(), sb = storage(), sd = storage();
        T* a = sa.front().v + kGuard + offset;
        T* b = sb.front().v + kGuard + offset;
        T* d = sd.front().v + kGuard + offset;
        for (size_t i = 0; i < n; ++i) {
          a[i] = static_cast<T>(i % 50);
          b[i] = static_cast<T>(i % 7 + 1);
        }
        auto poison = [&] {
          for (size_t i = 0; i < total; ++i) sd.front().v[i] = static_cast<T>(kPoison);
        };
        auto untouched = [&](const char* what) {
          for (int g = 1; g <= kGuard; ++g) {
            ASSERT_EQ(d[-g], static_cast<T>(kPoison)) << what << " wrote before, n " << n;
            ASSERT_EQ(d[n + g - 1], static_cast<T>(kPoison)) << what << " wrote after, n " << n;
          }
        };
        poison();
        onTeam(nthreads, [&](TeamExec& exec) { teamCopy(exec, d, a, n, op, false, false); });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], a[i]) << "copy, n " << n << " at " << i;
        untouched("copy");
        poison();
        onTeam(nthreads, [&](TeamExec& exec) { teamReduce(exec, d, a, b, n, op, false, false, false); });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], static_cast<T>(a[i] + b[i])) << "reduce, n " << n << " at " << i;
        untouched("reduce");
      }
    }
  }
}

// Passes over one buffer follow each other without a barrier (simple_primitives.h's
// reduceAll and recvReduceCopySend: each thread rereads only what it wrote itself), and
// the passes may take different paths when only some of their pointers are aligned. So
// every element, the last partial pack's too, must belong to the same thread on both paths.
TYPED_TEST(TeamOpsTest, EveryElementHasTheSameThreadAlignedOrNot) {
  using T = TypeParam;
  const size_t pack = detail::Pack16<T>::kElems;
  struct Team {
    int t, n;
    int tid() const { return t; }
    int nthreads() const { return n; }
  };
  for (int nthreads : {1, 3, 4, 32}) {
    for (size_t n : sizesFor(pack)) {
      std::vector<int> aligned(n, -1), misaligned(n, -1);
      for (int t = 0; t < nthreads; ++t) {
        const Team exec{t, nthreads};
        auto own = [&](std::vector<int>& owner, size_t i, size_t m) {
          for (size_t e = i; e < i + m; ++e) owner[e] = t;
        };
        detail::forEachTeamPack<Team, T>(exec, n, [&](size_t i, size_t m) { own(misaligned, i, m); });
        detail::forEachTeamPackBatch<Team, T>(
            exec, n,
            [&](const size_t* at, int count) {
              for (int u = 0; u < count; ++u) own(aligned, at[u], pack);
            },
            [&](size_t i, size_t m) { own(aligned, i, m); });
      }
      for (size_t e = 0; e < n; ++e) {
        ASSERT_NE(aligned[e], -1) << "n " << n << ": element " << e << " has no thread";
        ASSERT_EQ(aligned[e], misaligned[e]) << nthreads << " threads, n " << n << ": element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
