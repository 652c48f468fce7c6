// Collects a rank's failures without stopping it: every rank must keep issuing
// the same sequence of collectives, or the others would hang waiting for it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/rank_launcher.h"

namespace chorus_test {

// The first wrong element of one collective call on one rank.
struct Mismatch {
  std::string collective;  // "AllReduce"
  std::string type;        // "ncclFloat16"
  std::string op;          // "sum", "premulsum(device)", "-" for data movement
  size_t count = 0;
  bool inPlace = false;
  int root = -1;  // -1 where the collective has no root
  int rank = 0;
  size_t index = 0;  // element index in the receive buffer
  double expected = 0;
  double got = 0;
  double tolerance = 0;  // allowed |got - expected|; 0 means exact
  size_t wrongElements = 1;

  std::string describe() const;
};

class FailureLog {
 public:
  explicit FailureLog(size_t maxMessages = 5) : maxMessages_(maxMessages) {}
  void add(std::string message);
  void add(const Mismatch& mismatch) { add(mismatch.describe()); }
  bool empty() const { return failures_ == 0; }
  size_t failures() const { return failures_; }
  RankOutcome outcome() const;

 private:
  size_t maxMessages_;
  size_t failures_ = 0;
  std::vector<std::string> messages_;
};

}  // namespace chorus_test
