#include "src/comm/trees.h"

#include <algorithm>

namespace chorus {
namespace {

void addChild(TreeLinks* t, int child) {
  if (child >= 0) t->children[t->nChildren++] = child;
}

}  // namespace

// In-order binary tree: a rank's level is its lowest set bit; its parent is the
// nearest rank one level up, its children the nearest ranks one level down.
TreeLinks binaryTree(int nranks, int rank) {
  TreeLinks t;
  int bit = 1;
  while (bit < nranks && !(bit & rank)) bit <<= 1;
  if (rank == 0) {
    addChild(&t, nranks > 1 ? bit >> 1 : -1);  // the root's single child
    return t;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= nranks) up = rank ^ bit;
  t.parent = up;
  int low = bit >> 1;
  if (low == 0) return t;  // a leaf
  addChild(&t, rank - low);
  int right = rank + low;
  while (right >= nranks && low > 0) {  // the right subtree may be cut off by nranks
    low >>= 1;
    right = rank + low;
  }
  if (low > 0 && right < nranks) addChild(&t, right);
  return t;
}

TreeLinks doubleBinaryTree(int nranks, int rank, int treeIndex) {
  if (treeIndex % 2 == 0) return binaryTree(nranks, rank);
  // Mirror (n even) or shift (n odd) tree 0, mapping ranks in and out.
  auto map = [nranks](int r) { return nranks % 2 == 0 ? nranks - 1 - r : (r + nranks - 1) % nranks; };
  auto unmap = [nranks](int r) { return r < 0 ? -1 : nranks % 2 == 0 ? nranks - 1 - r : (r + 1) % nranks; };
  TreeLinks base = binaryTree(nranks, map(rank));
  TreeLinks t;
  t.parent = unmap(base.parent);
  for (int i = 0; i < base.nChildren; ++i) addChild(&t, unmap(base.children[i]));
  return t;
}

TreeLinks hostChainTree(const std::vector<std::vector<int>>& chains, int rank, int treeIndex) {
  const int nHosts = static_cast<int>(chains.size());
  for (int h = 0; h < nHosts; ++h) {
    const std::vector<int>& chain = chains[h];
    for (size_t k = 0; k < chain.size(); ++k) {
      if (chain[k] != rank) continue;
      TreeLinks t;
      if (k > 0) {
        t.parent = chain[k - 1];
      } else {
        // The chain's head stands for its host in the tree over hosts.
        const TreeLinks hosts = doubleBinaryTree(nHosts, h, treeIndex);
        t.parent = hosts.parent < 0 ? -1 : chains[hosts.parent].front();
        for (int i = 0; i < hosts.nChildren; ++i) addChild(&t, chains[hosts.children[i]].front());
      }
      if (k + 1 < chain.size()) addChild(&t, chain[k + 1]);
      return t;
    }
  }
  return TreeLinks{};
}

int hostChainTreeDepth(const std::vector<std::vector<int>>& chains) {
  const int nHosts = static_cast<int>(chains.size());
  int depth = 0;
  for (int treeIndex = 0; treeIndex < 2; ++treeIndex) {
    for (int h = 0; h < nHosts; ++h) {
      int hops = 0;  // from host h's head up to the root's
      for (int at = h; doubleBinaryTree(nHosts, at, treeIndex).parent >= 0; ++hops)
        at = doubleBinaryTree(nHosts, at, treeIndex).parent;
      depth = std::max(depth, hops + static_cast<int>(chains[h].size()) - 1);
    }
  }
  return depth;
}

}  // namespace chorus
