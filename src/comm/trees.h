// The double binary tree (as NCCL builds it): two binary trees over the ranks such
// that a rank that is an inner node in one tree is a leaf in the other, so every
// rank sends and receives in both and the trees together use every link evenly.
// Tree 0 is the classic in-order binary tree over ranks 0..n-1 (root 0 has one
// child); tree 1 is tree 0 mirrored (n even) or shifted by one (n odd).
//
// Across hosts (NCCL's trees): the ranks of each host form a chain, and the double binary
// tree spans the hosts, each represented by the first rank of its chain. So each tree
// crosses the network nHosts - 1 times instead of up to once per rank; a chain's head has
// up to three children (two hosts, and the next rank of its chain).
#pragma once

#include <vector>

namespace chorus {

struct TreeLinks {
  int parent = -1;  // -1 at the root
  int children[3] = {-1, -1, -1};
  int nChildren = 0;
};

TreeLinks binaryTree(int nranks, int rank);
TreeLinks doubleBinaryTree(int nranks, int rank, int treeIndex);
// `chains`: the ranks of each host, in chain order (every rank in exactly one).
TreeLinks hostChainTree(const std::vector<std::vector<int>>& chains, int rank, int treeIndex);
// Hops from the root to the deepest rank of hostChainTree (of either tree).
int hostChainTreeDepth(const std::vector<std::vector<int>>& chains);

}  // namespace chorus
