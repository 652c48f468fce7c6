// CHORUS_FAULT's grammar (src/fault/fault_injection.h): well-formed rules parse into what
// they say; each malformed one is left out with an error naming it and why, and the
// well-formed rules beside it still count. What the rules do is tested through the public
// API (tests/api/fault_injection_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "src/fault/fault_injection.h"

namespace chorus {
namespace {

FaultRule parseOne(const std::string& text) {
  const FaultRules parsed = parseFaultRules(text);
  EXPECT_TRUE(parsed.errors.empty()) << text << ": " << (parsed.errors.empty() ? "" : parsed.errors[0]);
  EXPECT_EQ(parsed.rules.size(), 1u) << text;
  return parsed.rules.empty() ? FaultRule{} : parsed.rules[0];
}

TEST(FaultRules, TheIssuesExamples) {
  const FaultRule kill = parseOne("rank3:kill@AllReduce#100");
  EXPECT_EQ(kill.rank, 3);
  EXPECT_EQ(kill.action, FaultAction::Kill);
  EXPECT_FALSE(kill.anyCall);
  EXPECT_EQ(kill.call, FaultCall::AllReduce);
  EXPECT_EQ(kill.nth, 100u);
  EXPECT_EQ(kill.text, "rank3:kill@AllReduce#100");

  const FaultRule stall = parseOne("rank1:stall@#20");
  EXPECT_EQ(stall.rank, 1);
  EXPECT_EQ(stall.action, FaultAction::Stall);
  EXPECT_TRUE(stall.anyCall);
  EXPECT_EQ(stall.nth, 20u);

  const FaultRule delay = parseOne("rank0:delay=50ms@Send");
  EXPECT_EQ(delay.rank, 0);
  EXPECT_EQ(delay.action, FaultAction::Delay);
  EXPECT_EQ(delay.delayUs, 50000u);
  EXPECT_FALSE(delay.anyCall);
  EXPECT_EQ(delay.call, FaultCall::Send);
  EXPECT_EQ(delay.nth, 0u) << "no #N: every Send";
}

TEST(FaultRules, DelayUnits) {
  EXPECT_EQ(parseOne("rank0:delay=7us@#1").delayUs, 7u);
  EXPECT_EQ(parseOne("rank0:delay=7ms@#1").delayUs, 7000u);
  EXPECT_EQ(parseOne("rank0:delay=7s@#1").delayUs, 7000000u);
  EXPECT_EQ(parseOne("rank0:delay=0ms@#1").delayUs, 0u);
}

TEST(FaultRules, Break) {
  const FaultRule rule = parseOne("rank2:break@Broadcast#4");
  EXPECT_EQ(rule.rank, 2);
  EXPECT_EQ(rule.action, FaultAction::Break);
  EXPECT_EQ(rule.call, FaultCall::Broadcast);
  EXPECT_EQ(rule.nth, 4u);
}

TEST(FaultRules, EveryCallKindByNameInAnyCaseWithOrWithoutNccl) {
  const std::pair<const char*, FaultCall> names[] = {
      {"AllReduce", FaultCall::AllReduce},
      {"Broadcast", FaultCall::Broadcast},
      {"Bcast", FaultCall::Broadcast},
      {"Reduce", FaultCall::Reduce},
      {"AllGather", FaultCall::AllGather},
      {"ReduceScatter", FaultCall::ReduceScatter},
      {"AlltoAll", FaultCall::AlltoAll},
      {"Gather", FaultCall::Gather},
      {"Scatter", FaultCall::Scatter},
      {"Send", FaultCall::Send},
      {"Recv", FaultCall::Recv},
      {"allreduce", FaultCall::AllReduce},
      {"ncclAllGather", FaultCall::AllGather},
      {"NCCLRECV", FaultCall::Recv},
  };
  for (const auto& [name, call] : names) {
    const FaultRule rule = parseOne(std::string("rank0:kill@") + name + "#2");
    EXPECT_EQ(rule.call, call) << name;
    EXPECT_STRNE(faultCallName(rule.call), "") << name;
  }
  EXPECT_STREQ(faultCallName(FaultCall::AlltoAll), "AlltoAll");
}

TEST(FaultRules, SeveralRulesWithEitherSeparatorAndBlanks) {
  const FaultRules parsed = parseFaultRules("  rank0:delay=2s@Recv#1 ; rank2:stall@#3,rank1 : KILL @ reduce # 5 ,, ;");
  EXPECT_TRUE(parsed.errors.empty()) << parsed.errors[0];
  ASSERT_EQ(parsed.rules.size(), 3u);
  EXPECT_EQ(parsed.rules[0].text, "rank0:delay=2s@Recv#1");
  EXPECT_EQ(parsed.rules[0].call, FaultCall::Recv);
  EXPECT_EQ(parsed.rules[1].rank, 2);
  EXPECT_EQ(parsed.rules[1].action, FaultAction::Stall);
  EXPECT_EQ(parsed.rules[2].rank, 1);
  EXPECT_EQ(parsed.rules[2].action, FaultAction::Kill);
  EXPECT_EQ(parsed.rules[2].call, FaultCall::Reduce);
  EXPECT_EQ(parsed.rules[2].nth, 5u);
}

TEST(FaultRules, NothingToParse) {
  for (const char* text : {"", "   ", ",", " ; , ;"}) {
    const FaultRules parsed = parseFaultRules(text);
    EXPECT_TRUE(parsed.rules.empty()) << '"' << text << '"';
    EXPECT_TRUE(parsed.errors.empty()) << '"' << text << '"';
  }
}

TEST(FaultRules, EachMalformedRuleIsNamedWithWhyAndLeftOut) {
  const std::pair<const char*, const char*> bad[] = {
      {"kill@AllReduce#1", "starts with rank"},
      {"rank:kill@AllReduce#1", "needs a rank"},
      {"rankx:kill@#1", "needs a rank"},
      {"rank-1:kill@#1", "needs a rank"},
      {"rank99999999999:kill@#1", "needs a rank"},
      {"rank1kill@#1", "no ':'"},
      {"rank1:kill", "no '@"},
      {"rank1:explode@#1", "unknown action \"explode\""},
      {"rank1:kill=3@#1", "unknown action"},
      {"rank1:delay=5@#1", "unit"},
      {"rank1:delay=ms@#1", "unit"},
      {"rank1:delay=5min@#1", "unit"},
      {"rank1:delay=-5ms@#1", "unit"},
      {"rank1:delay=99999999999s@#1", "at most a day"},
      {"rank1:break=0@#1", "unknown action \"break=0\""},
      {"rank1:stall=1@#1", "unknown action"},
      {"rank1:kill@", "no call after '@'"},
      {"rank1:kill@Foo#1", "unknown call \"Foo\""},
      {"rank1:kill@AllReduce#0", "from 1"},
      {"rank1:kill@AllReduce#", "from 1"},
      {"rank1:kill@#", "from 1"},
      {"rank1:kill@#1x", "from 1"},
      {"rank1:kill@AllReduce#99999999999999999999", "from 1"},
  };
  for (const auto& [text, why] : bad) {
    const FaultRules parsed = parseFaultRules(text);
    EXPECT_TRUE(parsed.rules.empty()) << text;
    ASSERT_EQ(parsed.errors.size(), 1u) << text;
    EXPECT_NE(parsed.errors[0].find(std::string("\"") + text + "\""), std::string::npos)
        << text << ": the error should name the rule: " << parsed.errors[0];
    EXPECT_NE(parsed.errors[0].find(why), std::string::npos) << text << ": " << parsed.errors[0];
  }
}

TEST(FaultRules, WellFormedRulesBesideMalformedOnesStillCount) {
  const FaultRules parsed =
      parseFaultRules("rank1:explode@#1, rank0:delay=1ms@Send#2; rank2:kill@Nope, rank3:stall@#4");
  ASSERT_EQ(parsed.errors.size(), 2u);
  EXPECT_NE(parsed.errors[0].find("rank1:explode@#1"), std::string::npos) << parsed.errors[0];
  EXPECT_NE(parsed.errors[1].find("rank2:kill@Nope"), std::string::npos) << parsed.errors[1];
  ASSERT_EQ(parsed.rules.size(), 2u);
  EXPECT_EQ(parsed.rules[0].rank, 0);
  EXPECT_EQ(parsed.rules[0].action, FaultAction::Delay);
  EXPECT_EQ(parsed.rules[1].rank, 3);
  EXPECT_EQ(parsed.rules[1].action, FaultAction::Stall);
}

TEST(FaultRules, AnOpAsSubmittedIsTheCallItCameFrom) {
  EXPECT_EQ(faultCallOf(WorkKind::AllReduce), FaultCall::AllReduce);
  EXPECT_EQ(faultCallOf(WorkKind::ReduceScatter), FaultCall::ReduceScatter);
  EXPECT_EQ(faultCallOf(WorkKind::AllGather), FaultCall::AllGather);
  EXPECT_EQ(faultCallOf(WorkKind::Broadcast), FaultCall::Broadcast);
  EXPECT_EQ(faultCallOf(WorkKind::Reduce), FaultCall::Reduce);
  EXPECT_EQ(faultCallOf(WorkKind::Send), FaultCall::Send);
  EXPECT_EQ(faultCallOf(WorkKind::Recv), FaultCall::Recv);
}

}  // namespace
}  // namespace chorus
