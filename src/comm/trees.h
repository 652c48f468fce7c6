// The double binary tree (as NCCL builds it): two binary trees over the ranks such
// that a rank that is an inner node in one tree is a leaf in the other, so every
// rank sends and receives in both and the trees together use every link evenly.
// Tree 0 is the classic in-order binary tree over ranks 0..n-1 (root 0 has one
// child); tree 1 is tree 0 mirrored (n even) or shifted by one (n odd).
#pragma once

namespace chorus {

struct TreeLinks {
  int parent = -1;  // -1 at the root
  int children[2] = {-1, -1};
  int nChildren = 0;
};

TreeLinks binaryTree(int nranks, int rank);
TreeLinks doubleBinaryTree(int nranks, int rank, int treeIndex);

}  // namespace chorus
