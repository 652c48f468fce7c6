// src/comm/trees.h: every tree is one tree (one root, parents and children agree, every
// rank reached once); the double binary tree's two trees do not share inner ranks; across
// hosts, ranks of a host form a chain and each tree crosses between hosts once per host
// but one.
#include "src/comm/trees.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace chorus {
namespace {

using TreeOf = std::function<TreeLinks(int rank)>;

// Checks that `tree` over `n` ranks is one tree; returns its depth (-1 on failure).
int checkOneTree(int n, const TreeOf& tree, const std::string& what) {
  std::vector<TreeLinks> links(n);
  int root = -1;
  for (int r = 0; r < n; ++r) {
    links[r] = tree(r);
    if (links[r].parent < 0) {
      EXPECT_EQ(root, -1) << what << ": two roots, " << root << " and " << r;
      root = r;
    }
    EXPECT_LE(links[r].nChildren, 3) << what << " rank " << r;
  }
  if (root < 0) {
    ADD_FAILURE() << what << ": no root";
    return -1;
  }
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < links[r].nChildren; ++i) {
      const int c = links[r].children[i];
      EXPECT_TRUE(c >= 0 && c < n) << what << " rank " << r << " child " << c;
      if (c >= 0 && c < n) {
        EXPECT_EQ(links[c].parent, r) << what << ": " << c << "'s parent is not " << r;
      }
    }
  }
  // Every rank reached from the root exactly once.
  std::vector<int> depth(n, -1);
  std::vector<int> todo = {root};
  depth[root] = 0;
  int deepest = 0;
  while (!todo.empty()) {
    const int r = todo.back();
    todo.pop_back();
    for (int i = 0; i < links[r].nChildren; ++i) {
      const int c = links[r].children[i];
      if (c < 0 || c >= n) continue;
      EXPECT_EQ(depth[c], -1) << what << ": rank " << c << " reached twice";
      depth[c] = depth[r] + 1;
      deepest = std::max(deepest, depth[c]);
      todo.push_back(c);
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_GE(depth[r], 0) << what << ": rank " << r << " not in the tree";
  return deepest;
}

TEST(Trees, TheDoubleBinaryTreesAreTreesWhoseInnerRanksDiffer) {
  for (int n = 1; n <= 33; ++n) {
    for (int t = 0; t < 2; ++t) {
      const std::string what = std::to_string(n) + " ranks, tree " + std::to_string(t);
      const int depth = checkOneTree(
          n, [&](int r) { return doubleBinaryTree(n, r, t); }, what);
      int log2n = 0;
      while ((1 << log2n) < n) ++log2n;
      EXPECT_LE(depth, log2n + 1) << what;
    }
    if (n % 2 != 0 || n < 4) continue;
    for (int r = 0; r < n; ++r) {
      const bool inner0 = doubleBinaryTree(n, r, 0).nChildren > 0;
      const bool inner1 = doubleBinaryTree(n, r, 1).nChildren > 0;
      EXPECT_FALSE(inner0 && inner1) << n << " ranks: rank " << r << " is inner in both trees";
    }
  }
}

// Ranks dealt to hosts unevenly and out of order, as a ring may visit them.
std::vector<std::vector<int>> chainsOf(const std::vector<int>& hostOfRank, int nHosts) {
  std::vector<std::vector<int>> chains(nHosts);
  for (size_t r = 0; r < hostOfRank.size(); ++r) chains[hostOfRank[r]].push_back(static_cast<int>(r));
  return chains;
}

TEST(Trees, AcrossHostsEachHostIsAChainUnderATreeOfHosts) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1},                    // 2 hosts x 2
      {0, 1, 0, 1, 0, 1, 0, 1},        // 2 hosts x 4, interleaved
      {2, 0, 1, 2, 0, 1, 1},           // 3 hosts, uneven
      {0, 1, 2, 3, 4},                 // one rank per host
      {0, 0, 0, 1, 2, 2, 3, 3, 4, 5},  // 6 hosts, 1 to 3 ranks each
  };
  for (const std::vector<int>& hostOf : layouts) {
    const int n = static_cast<int>(hostOf.size());
    int nHosts = 0;
    for (int h : hostOf) nHosts = std::max(nHosts, h + 1);
    const std::vector<std::vector<int>> chains = chainsOf(hostOf, nHosts);
    int deepest = 0;
    for (int t = 0; t < 2; ++t) {
      const std::string what =
          std::to_string(n) + " ranks on " + std::to_string(nHosts) + " hosts, tree " + std::to_string(t);
      auto tree = [&](int r) { return hostChainTree(chains, r, t); };
      deepest = std::max(deepest, checkOneTree(n, tree, what));
      int crossings = 0;
      for (int r = 0; r < n; ++r) {
        const TreeLinks links = tree(r);
        if (links.parent >= 0 && hostOf[links.parent] != hostOf[r]) ++crossings;
      }
      EXPECT_EQ(crossings, nHosts - 1) << what;
      // Within a host: a chain in the given order.
      for (const std::vector<int>& chain : chains)
        for (size_t k = 1; k < chain.size(); ++k) EXPECT_EQ(tree(chain[k]).parent, chain[k - 1]) << what;
    }
    EXPECT_EQ(hostChainTreeDepth(chains), deepest) << n << " ranks on " << nHosts << " hosts";
  }
}

}  // namespace
}  // namespace chorus
