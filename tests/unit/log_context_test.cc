// The log context (core/debug.h): the rank and communicator name a thread's lines carry.
#include <gtest/gtest.h>

#include <string>

#include "core/debug.h"

namespace chorus {
namespace {

TEST(LogName, EqualNamesShareOneCopyAndAnEmptyNameIsEmpty) {
  const std::string a = "trainer-dp0";
  EXPECT_EQ(LogName(a), LogName(std::string("trainer-dp0")));
  EXPECT_EQ(LogName(a).c_str(), LogName("trainer-dp0").c_str());
  EXPECT_FALSE(LogName(a) == LogName("trainer-dp1"));
  EXPECT_STREQ(LogName("trainer-dp1").c_str(), "trainer-dp1");
  EXPECT_TRUE(LogName("").empty());
  EXPECT_TRUE(LogName().empty());
  EXPECT_FALSE(LogName(a).empty());
}

// The context keeps its own copy: the name it was made from may change or go (a
// communicator aborted from another thread while a call of it still logs).
TEST(LogName, TheContextOutlivesTheTextItWasMadeFrom) {
  std::string source = "a-communicator-whose-name-is-not-short";
  const ScopedLogContext scope(5, LogName(source));
  source.assign(source.size(), 'x');
  source.clear();
  source.shrink_to_fit();
  WARN("a line about it");
  EXPECT_EQ(std::string(lastErrorText()), "comm \"a-communicator-whose-name-is-not-short\": a line about it");
  EXPECT_EQ(logRank(), 5);
}

TEST(LogName, ScopesRestoreTheEnclosingContext) {
  setLogContext(1, LogName("outer"));
  {
    const ScopedLogContext inner(2, LogName("inner"));
    EXPECT_EQ(logRank(), 2);
    EXPECT_STREQ(logCommName(), "inner");
    {
      const ScopedLogContext unnamed(3, LogName());
      EXPECT_EQ(logRank(), 3);
      EXPECT_STREQ(logCommName(), "");
    }
    EXPECT_STREQ(logCommName(), "inner");
  }
  EXPECT_EQ(logRank(), 1);
  EXPECT_STREQ(logCommName(), "outer");
  setLogContext(-1, LogName());
}

}  // namespace
}  // namespace chorus
