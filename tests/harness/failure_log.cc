#include "harness/failure_log.h"

#include "harness/datatypes.h"

namespace chorus_test {

std::string Mismatch::describe() const {
  std::string text = collective + " type=" + type + " op=" + op + " count=" + std::to_string(count) +
                     " inPlace=" + (inPlace ? "yes" : "no");
  if (root >= 0) text += " root=" + std::to_string(root);
  text += ": rank " + std::to_string(rank) + " index " + std::to_string(index) + " expected " + formatValue(expected) +
          " got " + formatValue(got);
  if (tolerance > 0) text += " (tolerance " + formatValue(tolerance) + ")";
  if (wrongElements > 1) text += "; " + std::to_string(wrongElements) + " wrong elements in all";
  return text;
}

void FailureLog::add(std::string message) {
  ++failures_;
  if (messages_.size() < maxMessages_) messages_.push_back(std::move(message));
}

RankOutcome FailureLog::outcome() const {
  if (failures_ == 0) return RankOutcome::pass();
  std::string text;
  for (const std::string& message : messages_) text += "\n    " + message;
  if (failures_ > messages_.size()) {
    text += "\n    ... and " + std::to_string(failures_ - messages_.size()) + " more failures";
  }
  return RankOutcome::fail(text);
}

}  // namespace chorus_test
